"""The prepared-sample cache's default bounds, decided on each node (node/cache_sizing.py): they fit
beside Ray's object store and within the node's memory and disk, and say why."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from shardstream.service.node.cache_sizing import (
    DISK_CAP,
    GIB,
    MEMORY_CAP,
    NodeFacts,
    filesystem_type,
    free_bytes,
    memory_limit,
    size_disk_tier,
    size_memory_tier,
)
from shardstream.service.node.prepared_cache import open_prepared_cache
from shardstream.service.node.read_counters import SharedReadCounters


def _facts(**changes: object) -> NodeFacts:
    values: dict[str, object] = {"memory_dir_free": 24 * GIB, "memory_dir_filesystem": "tmpfs",
                                 "object_store": 7 * GIB, "memory_limit": 24 * GIB, "disk_dir_free": 69 * GIB}
    values.update(changes)
    return NodeFacts(**values)  # type: ignore[arg-type]


def test_the_memory_tier_takes_the_smallest_of_half_the_room_a_tenth_of_memory_and_the_cap() -> None:
    assert size_memory_tier(_facts()).bytes == int(24 * GIB * 0.10)  # a tenth of the memory limit
    # a pod: 2 GiB /dev/shm, 1.2 GiB of it Ray's store, 4 GiB memory limit -> half of 0.8 GiB
    assert size_memory_tier(_facts(memory_dir_free=2 * GIB, object_store=int(1.2 * GIB),
                                   memory_limit=4 * GIB)).bytes == int(0.8 * GIB * 0.5)
    assert size_memory_tier(_facts(memory_dir_free=1024 * GIB, memory_limit=1024 * GIB,
                                   object_store=0)).bytes == MEMORY_CAP


def test_the_memory_tier_is_off_with_no_room_beside_the_object_store_or_off_memory() -> None:
    full = size_memory_tier(_facts(memory_dir_free=2 * GIB, object_store=int(1.9 * GIB)))
    assert full.bytes == 0 and full.reason.startswith("off:") and "object store of 1.9 GiB" in full.reason
    docker = size_memory_tier(_facts(memory_dir_free=64 << 20, object_store=0))  # a container's 64 MB /dev/shm
    assert docker.bytes == 0 and "under 256 MiB" in docker.reason
    on_disk = size_memory_tier(_facts(memory_dir_filesystem="ext4"))
    assert on_disk.bytes == 0 and "ext4, not in memory" in on_disk.reason


def test_the_disk_tier_takes_a_quarter_of_the_free_space_up_to_the_cap() -> None:
    assert size_disk_tier(_facts(disk_dir_free=40 * GIB)).bytes == 10 * GIB
    assert size_disk_tier(_facts(disk_dir_free=4096 * GIB)).bytes == DISK_CAP
    small = size_disk_tier(_facts(disk_dir_free=512 << 20))
    assert small.bytes == 0 and small.reason.startswith("off:")
    assert size_disk_tier(_facts(disk_dir_free=40 * GIB)).reason.startswith("auto: a quarter of the 40.0 GiB")


def test_the_filesystem_of_a_directory_is_its_longest_mount_point(tmp_path: Path) -> None:
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(
        "22 1 8:1 / / rw - ext4 /dev/vda rw\n"
        "30 22 0:5 / /dev/shm rw,nosuid - tmpfs tmpfs rw\n"
        "31 22 0:6 / /dev/shmem rw - xfs /dev/vdb rw\n")
    assert filesystem_type("/dev/shm/shardstream-prepared", str(mountinfo)) == "tmpfs"
    assert filesystem_type("/dev/shmem/x", str(mountinfo)) == "xfs"  # not /dev/shm: a prefix is no parent
    assert filesystem_type("/var/cache", str(mountinfo)) == "ext4"
    assert filesystem_type("/x", str(tmp_path / "missing")) == ""


def test_this_machine_is_measured_from_its_own_files(tmp_path: Path) -> None:
    st = os.statvfs(tmp_path)
    assert free_bytes(str(tmp_path / "not" / "yet")) == pytest.approx(st.f_bavail * st.f_frsize, rel=0.01)
    assert 0 < memory_limit() <= os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    cgroup = tmp_path / "cgroup"
    cgroup.mkdir()
    (cgroup / "memory.max").write_text("1073741824\n")
    assert memory_limit(str(cgroup)) == GIB
    (cgroup / "memory.max").write_text("max\n")
    assert memory_limit(str(cgroup)) == os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def test_given_bounds_are_used_as_given_and_unset_ones_are_sized_on_the_node(tmp_path: Path) -> None:
    cache, sizing = open_prepared_cache(str(tmp_path / "mem"), 0, str(tmp_path / "disk"), 5 << 20,
                                        SharedReadCounters())
    assert cache is not None and [t.name for t in cache.tiers] == ["disk"] and cache.tiers[0].max_bytes == 5 << 20
    assert (sizing.memory.bytes, sizing.memory.reason) == (0, "off: set to 0")
    assert (sizing.disk.bytes, sizing.disk.reason) == (5 << 20, "set")
    # unset: sized here; tmp_path is no tmpfs, so no memory tier there, and the disk tier has its quarter
    cache, sizing = open_prepared_cache(str(tmp_path / "mem"), None, str(tmp_path / "disk"), None,
                                        SharedReadCounters())
    if filesystem_type(str(tmp_path)) not in ("tmpfs", "ramfs"):
        assert sizing.memory.bytes == 0 and "not in memory" in sizing.memory.reason
    assert sizing.disk.reason.startswith(("auto:", "off:"))
    assert cache is None or all(t.max_bytes > 0 for t in cache.tiers)
    assert open_prepared_cache("", 0, "", 0, SharedReadCounters())[0] is None


def test_the_disk_tier_lives_in_the_local_copy_directory_by_default(tmp_path: Path) -> None:
    cache, _ = open_prepared_cache(str(tmp_path / "mem"), 0, "", 1 << 20, SharedReadCounters(),
                                   local_copy_dir=str(tmp_path / "copy"))
    assert cache is not None and cache.tiers[0].root.parent == tmp_path / "copy" / "prepared-samples"
