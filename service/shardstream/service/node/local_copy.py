"""The node's local copy of the row groups its decoders read: uncompressed Arrow IPC files.

Why: a shuffled batch needs rows from all over the dataset, and Parquet can
only hand out a row by reading (and decompressing) its whole row group. With
a dataset larger than the decoders' memory, every sample then cost a row
group read from storage (measured 0.01x of unshuffled). Here each row group
is fetched from storage once per node, written as an uncompressed Arrow IPC
file, and from then on memory-mapped: taking a row touches only that row's
pages. Storage is read about once per dataset per node, whatever the order.

The files are shared by every decode actor on the node. A row group being
fetched is locked (``flock`` on one of 4,096 lock stripes), so two actors
never fetch the same one twice; files appear by atomic rename, so a reader
never sees half a file. The copy is bounded in bytes (within a percent per
actor on the node): past the bound, the least recently used files go (a file still mapped by a reader stays readable
until it is unmapped). It outlives jobs and actors, and after a node restart
with an empty disk it is simply filled again.

The key holds the shard's URL, size and version (generation, ETag or mtime),
the row group and the columns: a rewritten file is never served from an old
copy. Each file carries that key and a checksum of its bytes
(local_copy_entry.py), verified whenever an actor maps it: a file that fails,
or a path that cannot be read, is a miss, dropped and fetched again, counted
and logged (cache_fault.py). A mapped file written in place or replaced on
disk since it was verified is mapped (and verified) again at its next use.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import logging
import os
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from shardstream.service.dataset import Shard
from shardstream.service.node.cache_fault import CacheFault, drop_path, record_fault
from shardstream.service.node.local_copy_entry import (
    FORMAT,
    Stamp,
    key_fields,
    read_entry,
    stamp_of,
    write_entry,
)
from shardstream.service.node.read_counters import SharedReadCounters

log = logging.getLogger(__name__)

SUFFIX = ".arrow"
LOCK_STRIPES_HEX = 3  # 16**3 = 4,096 lock files
LOW_WATER = 0.9  # eviction frees down to this fraction of the bound
STALE_TEMP_S = 600.0  # half-written files older than this are from a writer that died
# Each actor counts its own writes; every this much of the bound it writes, it counts the whole
# directory again (what the node's other actors wrote too), so together they overshoot the bound
# by at most (actors on the node) x this fraction (and one row group).
RECOUNT_FRACTION = 0.01
# A mapped file's atime (its recency for eviction) is renewed at most this often: a shuffled batch
# touches dozens of row groups, and a utime each cost 10% of gathering it.
TOUCH_EVERY_S = 1.0
MAX_MAPPED = 2048  # row groups one process keeps mapped (opening one costs ~0.3 ms)


def default_directory() -> str:
    return os.path.join(tempfile.gettempdir(), "shardstream-local-copy")


@dataclass(frozen=True)
class RowGroupKey:
    shard: Shard
    row_group: int
    columns: tuple[str, ...] | None

    @property
    def ident(self) -> tuple[str, int, str, str, int, tuple[str, ...] | None]:
        """What names the row group's file, cheap to hash (a Shard holds every row group's size)."""
        s = self.shard
        return s.url, s.size, s.version, s.reading, self.row_group, self.columns

    @property
    def digest(self) -> str:
        s = self.shard
        text = f"{FORMAT}\0{s.identity}\0{self.row_group}\0{self.columns}"
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    @property
    def fields(self) -> list[Any]:
        """The key the row group's file carries, checked when it is mapped."""
        return key_fields(self.shard.identity, self.row_group, self.columns)


def _touch(path: str, st: os.stat_result) -> None:
    """Mark the file used now (its atime: what eviction orders by), keeping the writer's mtime."""
    with contextlib.suppress(OSError):
        os.utime(path, ns=(time.time_ns(), st.st_mtime_ns))


class LocalCopy:
    def __init__(self, directory: str, max_bytes: int, counters: SharedReadCounters) -> None:
        self.root = Path(directory)
        self._root = str(self.root)
        self.max_bytes = max_bytes
        self.counters = counters
        (self.root / "locks").mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        # Opened by this process, LRU: ident -> (table, its file, last touched, the file as verified).
        # A hit costs no hashing of paths.
        self._mapped: OrderedDict[tuple[Any, ...], tuple[pa.Table, str, float, Stamp]] = OrderedDict()
        self.touch_every_s = TOUCH_EVERY_S
        self._remove_stale_temp_files()
        self._estimate = self._scan()[1]
        self._written_since_scan = 0
        self.counters.set_disk_bytes(self._estimate)
        self._warned_full = False

    def cached(self, key: RowGroupKey) -> pa.Table | None:
        """The row group if this process has it mapped already (a memory hit: the caller counts
        it), else None."""
        return self._still_mapped(key.ident)

    def get(self, key: RowGroupKey, fetch: Callable[[], pa.Table]) -> pa.Table:
        """The row group, memory-mapped from the local copy; fetched and stored first if missing.

        Call after `cached` said None: this counts a memory miss."""
        path = self._path(key)
        self.counters.count(memory_misses=1)
        opened = self._open(path, key)
        if opened is None:
            with self._locked(key):
                opened = self._open(path, key)  # another actor may have fetched it while this one waited
                if opened is None:
                    self.counters.count(disk_misses=1)
                    fetched = fetch()
                    opened = self._open(path, key) if self._store(path, key, fetched) else None
                    if opened is None:
                        return fetched
                    self._remember(key, path, *opened)
                    return opened[0]
        self.counters.count(disk_hits=1)
        self._remember(key, path, *opened)
        return opened[0]

    def _still_mapped(self, ident: tuple[Any, ...]) -> pa.Table | None:
        """The table this process already mapped, while its file is still in the copy as verified.

        Each use checks the file's stamp (one stat): a file written in place or replaced since it
        was verified is mapped, and so verified, again; an evicted one is fetched again (a mapping
        outlives its file, and evicted files must not go on holding disk). Recency for eviction is
        the file's atime, renewed at most once per `touch_every_s` (a utime each use cost 10% of
        gathering a shuffled batch); its mtime stays the writer's, so a write shows."""
        with self._lock:
            entry = self._mapped.get(ident)
        if entry is None:
            return None
        table, path, touched, stamp = entry
        try:
            st = os.stat(path)
            if stamp_of(st) != stamp:
                raise FileNotFoundError(path)
        except OSError:
            with self._lock:
                self._mapped.pop(ident, None)
            return None
        now = time.monotonic()
        if now - touched >= self.touch_every_s:  # its place in the LRU too is renewed at most that often
            with self._lock:
                if ident in self._mapped:
                    self._mapped.move_to_end(ident)
                    self._mapped[ident] = (table, path, now, stamp)
            _touch(path, st)
        return table

    def _remember(self, key: RowGroupKey, path: str, table: pa.Table, stamp: Stamp) -> None:
        with self._lock:
            self._mapped[key.ident] = (table, path, time.monotonic(), stamp)
            while len(self._mapped) > MAX_MAPPED:
                self._mapped.popitem(last=False)

    def _path(self, key: RowGroupKey) -> str:
        digest = key.digest
        return os.path.join(self._root, digest[:2], digest + SUFFIX)

    def _open(self, path: str, key: RowGroupKey) -> tuple[pa.Table, Stamp] | None:
        """The file's table, memory-mapped and verified to be `key`'s (its descriptor closed: the
        mapping lives on with the table's buffers), and the file's stamp as verified; None when it
        is not in the copy, or is refused (then dropped, counted and logged: fetched again)."""
        try:
            entry = read_entry(path, key.fields)
        except CacheFault as fault:
            record_fault(self.counters, "local_copy", path, fault)
            drop_path(path)
            return None
        if entry is None:
            return None
        self.counters.verified(entry.verify_seconds, entry.nbytes)
        with contextlib.suppress(OSError):
            _touch(path, os.stat(path))  # least recently used goes first
        return entry.table, entry.stamp

    @contextlib.contextmanager
    def _locked(self, key: RowGroupKey) -> Iterator[None]:
        lock_path = self.root / "locks" / (key.digest[:LOCK_STRIPES_HEX] + ".lock")
        with open(lock_path, "a+b") as lock_file:
            fcntl.flock(lock_file, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock_file, fcntl.LOCK_UN)

    def _store(self, path: str, key: RowGroupKey, table: pa.Table) -> bool:
        """Write `table` to `path` atomically; False (and the caller serves it uncopied) when it
        cannot be stored: larger than the whole bound, or the disk refuses."""
        if table.nbytes > self.max_bytes * LOW_WATER:
            return False
        folder, name = os.path.split(path)
        temp = os.path.join(folder, f".{name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            os.makedirs(folder, exist_ok=True)
            size = write_entry(temp, key.fields, table)
            os.replace(temp, path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            if not self._warned_full:
                self._warned_full = True
                log.warning("cannot write the local copy under %s (%s)%s: rows are served without it",
                            self.root, exc, "; the disk is full" if exc.errno == errno.ENOSPC else "")
            return False
        with self._lock:
            self._estimate += size
            self._written_since_scan += size
            recount = (self._estimate > self.max_bytes
                       or self._written_since_scan >= self.max_bytes * RECOUNT_FRACTION)
        if recount:
            self._recount()
        else:
            self.counters.set_disk_bytes(self._estimate)
        return True

    def _scan(self) -> tuple[list[tuple[float, int, Path]], int]:
        """(last used: atime, size, path) of every stored file, and their total size."""
        files: list[tuple[float, int, Path]] = []
        for sub in self.root.iterdir():
            if sub.name == "locks" or not sub.is_dir():
                continue
            for entry in os.scandir(sub):
                if entry.name.endswith(SUFFIX):
                    with contextlib.suppress(FileNotFoundError):
                        st = entry.stat()
                        files.append((st.st_atime, st.st_size, Path(entry.path)))
        return files, sum(size for _, size, _ in files)

    def _recount(self) -> None:
        """Count what the copy really holds (every actor on the node writes to it) and, when over
        the bound, remove the least recently used files down to the low-water mark.

        Several actors may evict at once; each works from its own scan, so together they may
        remove a little more than needed, never less."""
        files, total = self._scan()
        removed = 0
        if total > self.max_bytes:
            target = int(self.max_bytes * LOW_WATER)
            for _, size, path in sorted(files):
                if total <= target:
                    break
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                    total -= size
                    removed += 1
            log.info("local copy over %d bytes: removed %d least recently used row group(s)",
                     self.max_bytes, removed)
        with self._lock:
            self._estimate = total
            self._written_since_scan = 0
        self.counters.set_disk_bytes(total)

    def _remove_stale_temp_files(self) -> None:
        cutoff = time.time() - STALE_TEMP_S
        for temp in self.root.glob("*/.*.tmp"):
            with contextlib.suppress(OSError):
                if temp.stat().st_mtime < cutoff:
                    temp.unlink()


__all__ = ["LocalCopy", "RowGroupKey", "default_directory"]
