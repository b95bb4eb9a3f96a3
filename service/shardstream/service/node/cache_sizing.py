"""How big each tier of a node's prepared-sample cache is when no bound is given: decided on the node.

The cache is on by default, so its default bounds must fit any node. Each
decode actor measures its node when it starts (`measure_node`) and sizes the
tiers from what it finds (`size_memory_tier`, `size_disk_tier`, pure):

* **Memory tier** (a tmpfs, /dev/shm by default): its pages are the node's
  (or the container's) memory, and Ray's object store lives in the same
  /dev/shm. Room = the filesystem's free space plus what the tier already
  holds, minus the node's whole object store (its pages are taken as they
  are used, so today's free space does not show them). The tier takes half
  that room, at most a tenth of the memory limit, at most 8 GiB; off when
  the directory is not in memory or less than 256 MiB would be left.
* **Disk tier** (under the local copy's directory): a quarter of the free
  space plus what the tier holds, at most 64 GiB; off under 256 MiB.

Each decision carries its reason, logged by the actor and shown by
`shardstream status` (NodeReads). A bound given in the settings is used as
given; 0 turns a tier off.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from shardstream.service.node_messages import TierSize

log = logging.getLogger(__name__)

GIB = 2**30
MEMORY_SHARE_OF_ROOM = 0.5
MEMORY_SHARE_OF_LIMIT = 0.10
MEMORY_CAP = 8 * GIB
DISK_SHARE_OF_FREE = 0.25
DISK_CAP = 64 * GIB
SMALLEST_TIER = 256 * 2**20
MEMORY_FILESYSTEMS = ("tmpfs", "ramfs")


@dataclass(frozen=True)
class NodeFacts:
    """What sizing the tiers reads from a node (bytes)."""

    memory_dir_free: int  # free on the memory tier's filesystem, plus what the tier already holds
    memory_dir_filesystem: str  # its type, e.g. tmpfs
    object_store: int  # this node's Ray object store, whole
    memory_limit: int  # the node's memory, or the container's limit when lower
    disk_dir_free: int  # free on the disk tier's filesystem, plus what the tier already holds


def _gib(nbytes: float) -> str:
    return f"{nbytes / GIB:.1f} GiB"


def size_memory_tier(facts: NodeFacts) -> TierSize:
    if facts.memory_dir_filesystem not in MEMORY_FILESYSTEMS:
        return TierSize(0, f"off: its directory is on {facts.memory_dir_filesystem or 'an unknown filesystem'}, "
                           "not in memory")
    room = facts.memory_dir_free - facts.object_store
    by_room, by_limit = int(room * MEMORY_SHARE_OF_ROOM), int(facts.memory_limit * MEMORY_SHARE_OF_LIMIT)
    chosen = max(0, min(by_room, by_limit, MEMORY_CAP))
    how = (f"{_gib(facts.memory_dir_free)} free in memory less Ray's object store of {_gib(facts.object_store)} "
           f"leaves {_gib(max(room, 0))}; half of it, at most a tenth of the {_gib(facts.memory_limit)} memory "
           f"limit and {_gib(MEMORY_CAP)}")
    if chosen < SMALLEST_TIER:
        return TierSize(0, f"off: {how} is under {SMALLEST_TIER >> 20} MiB")
    return TierSize(chosen, f"auto: {how}")


def size_disk_tier(facts: NodeFacts) -> TierSize:
    chosen = min(int(facts.disk_dir_free * DISK_SHARE_OF_FREE), DISK_CAP)
    how = f"a quarter of the {_gib(facts.disk_dir_free)} free on its disk, at most {_gib(DISK_CAP)}"
    if chosen < SMALLEST_TIER:
        return TierSize(0, f"off: {how} is under {SMALLEST_TIER >> 20} MiB")
    return TierSize(chosen, f"auto: {how}")


def given(nbytes: int) -> TierSize:
    """A bound the settings name."""
    return TierSize(nbytes, "set" if nbytes > 0 else "off: set to 0")


# ---------------------------------------------------------------- measuring a node

def free_bytes(directory: str) -> int:
    """Free space for this user on the filesystem holding `directory` (or its nearest existing parent)."""
    path = Path(directory)
    while not path.exists() and path != path.parent:
        path = path.parent
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def filesystem_type(directory: str, mountinfo: str = "/proc/self/mountinfo") -> str:
    """The type of the filesystem `directory` lies on (the longest mount point above it), "" if unknown."""
    target = os.path.realpath(directory)
    best, kind = "", ""
    try:
        with open(mountinfo, encoding="utf-8") as lines:
            for line in lines:
                fields = line.split()
                if " - " not in line or len(fields) < 5:
                    continue
                mount = fields[4].replace("\\040", " ")
                fs_type = line.split(" - ", 1)[1].split()[0]
                inside = target == mount or target.startswith(mount.rstrip("/") + "/")
                if inside and len(mount) >= len(best):
                    best, kind = mount, fs_type
    except OSError:
        return ""
    return kind


def memory_limit(cgroup_root: str = "/sys/fs/cgroup") -> int:
    """The machine's memory, or the container's cgroup limit when that is lower."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for name in ("memory.max", "memory/memory.limit_in_bytes"):  # cgroup v2, v1
        try:
            raw = Path(cgroup_root, name).read_text().strip()
        except OSError:
            continue
        if raw.isdigit():
            total = min(total, int(raw))
    return total


def node_object_store(node_id: str) -> int:
    """The object store of Ray node `node_id`, bytes (0 when Ray does not say, or runs nowhere here)."""
    import ray

    if not ray.is_initialized():
        return 0
    for node in ray.nodes():
        if node.get("NodeID") == node_id:
            return int(node.get("Resources", {}).get("object_store_memory", 0))
    return 0


def measure_node(memory_dir: str, memory_held: int, disk_dir: str, disk_held: int, node_id: str) -> NodeFacts:
    return NodeFacts(memory_dir_free=free_bytes(memory_dir) + memory_held,
                     memory_dir_filesystem=filesystem_type(memory_dir),
                     object_store=node_object_store(node_id), memory_limit=memory_limit(),
                     disk_dir_free=free_bytes(disk_dir) + disk_held)


__all__ = ["NodeFacts", "filesystem_type", "free_bytes", "given", "measure_node", "memory_limit",
           "size_disk_tier", "size_memory_tier"]
