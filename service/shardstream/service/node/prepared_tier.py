"""One tier of the prepared-sample cache: a directory of prepared-sample files, bounded in bytes.

A sample is one file, an entry that carries its own key and checksum
(prepared_entry.py); this module stores and finds the files, the cache
verifies each on reading. Files appear by
atomic rename, so the node's decode actors share a tier without locks, and
they outlive jobs and actors; after a node restart an empty tier simply
fills again.

A full tier admits nothing more rather than evicting the least recently used
sample: each epoch asks for every sample in a new order, so evicting by
recency throws out entries just before they are asked for, while keeping a
fixed part of the dataset serves that part every epoch. Room is made only by
removing whole datasets (a directory per prepare identity and shard) that no
actor used for ``STALE_DIRECTORY_S``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import threading
import time
from pathlib import Path

from shardstream.service.node.cache_fault import CacheFault, drop_path

log = logging.getLogger(__name__)

LOW_WATER = 0.9  # making room frees down to this fraction of the bound
RECOUNT_FRACTION = 0.01  # re-count the whole tier every this much of its bound written by this actor
STALE_DIRECTORY_S = 3600.0  # a dataset's entries unused this long may go to make room
FULL_RETRY_S = 30.0  # a tier found full and with nothing stale is not scanned again for this long
TOUCH_EVERY_S = 60.0  # how often an actor marks a directory it reads from as used


# ---------------------------------------------------------------- a tier

class SampleTier:
    """One directory of prepared-sample files, bounded in bytes, shared by the node's actors."""

    def __init__(self, name: str, directory: str, max_bytes: int) -> None:
        self.name = name
        self.root = Path(directory)
        self.max_bytes = max_bytes
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._remove_temp_files()
        self.stored_bytes = self._scan()[1]
        self._written_since_scan = 0
        self._full_until = 0.0
        self._touched: dict[str, float] = {}

    def path(self, folder: str, row: int) -> str:
        return os.path.join(self.root, folder, str(row))

    def load_file(self, folder: str, row: int) -> bytearray | None:
        """The sample's file as it is stored, unverified (the cache verifies it), or None when the
        tier does not hold it. CacheFault when the path cannot be read whole."""
        path = self.path(folder, row)
        try:
            with open(path, "rb") as f:
                data = bytearray(os.fstat(f.fileno()).st_size)
                got = f.readinto(data)
        except FileNotFoundError:
            return None
        except OSError as exc:  # a directory in the file's place, no permission, a failing disk
            raise CacheFault("io_error", f"{type(exc).__name__}: {exc.strerror or exc}") from exc
        if got != len(data):
            raise CacheFault("short_read", f"read {got} of {len(data)} bytes")
        self._touch(folder)
        return data

    def drop(self, folder: str, row: int) -> None:
        """Remove an entry refused on reading (a directory in its place too)."""
        drop_path(self.path(folder, row))

    def store(self, folder: str, row: int, parts: list[bytes | memoryview], size: int) -> bool:
        """Write the file atomically; False when the tier is full or refuses it."""
        if time.monotonic() < self._full_until or size > self.max_bytes * LOW_WATER:
            return False
        with self._lock:
            over = self.stored_bytes + size > self.max_bytes
        if over and not self._make_room(size):
            return False
        directory = os.path.join(self.root, folder)
        path = self.path(folder, row)
        temp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
        try:
            os.makedirs(directory, exist_ok=True)
            with open(temp, "wb") as f:
                f.writelines(parts)
            os.replace(temp, path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            log.warning("cannot write prepared samples to the %s tier under %s (%s): treating it as full for "
                        "%.0f s", self.name, self.root, exc, FULL_RETRY_S)
            self._full_until = time.monotonic() + FULL_RETRY_S
            return False
        with self._lock:
            self.stored_bytes += size
            self._written_since_scan += size
            recount = self._written_since_scan >= self.max_bytes * RECOUNT_FRACTION
        if recount:
            self._recount()
        return True

    def _touch(self, folder: str) -> None:
        """Mark the directory used (what decides which datasets may go when the tier is full)."""
        now = time.monotonic()
        if now - self._touched.get(folder, -TOUCH_EVERY_S) >= TOUCH_EVERY_S:
            self._touched[folder] = now
            with contextlib.suppress(OSError):
                os.utime(os.path.join(self.root, folder))

    def _scan(self) -> tuple[dict[str, tuple[float, int]], int]:
        """folder -> (last used, bytes), and the total."""
        folders: dict[str, tuple[float, int]] = {}
        for sub in os.scandir(self.root):
            if not sub.is_dir():
                continue
            with contextlib.suppress(FileNotFoundError):
                used = sub.stat().st_mtime
                size = sum(e.stat().st_size for e in os.scandir(sub.path) if not e.name.endswith(".tmp"))
                folders[sub.name] = (used, size)
        return folders, sum(size for _, size in folders.values())

    def _recount(self) -> int:
        total = self._scan()[1]
        with self._lock:
            self.stored_bytes, self._written_since_scan = total, 0
        return total

    def _make_room(self, size: int) -> bool:
        """Remove datasets unused for STALE_DIRECTORY_S, oldest first, until `size` fits under the
        low-water mark; False (and no scan for FULL_RETRY_S) when that is not enough."""
        folders, total = self._scan()
        cutoff = time.time() - STALE_DIRECTORY_S
        target = self.max_bytes * LOW_WATER - size
        for name, (used, folder_bytes) in sorted(folders.items(), key=lambda item: item[1][0]):
            if total <= target or used >= cutoff:
                break
            shutil.rmtree(os.path.join(self.root, name), ignore_errors=True)
            total -= folder_bytes
            log.info("prepared-sample %s tier full: removed %s (%d bytes, unused since %s)", self.name, name,
                     folder_bytes, time.ctime(used))
        with self._lock:
            self.stored_bytes, self._written_since_scan = total, 0
        if total + size > self.max_bytes:
            self._full_until = time.monotonic() + FULL_RETRY_S
            return False
        return True

    def _remove_temp_files(self) -> None:
        for temp in self.root.glob("*/*.tmp"):
            with contextlib.suppress(OSError):
                if temp.stat().st_mtime < time.time() - 600:
                    temp.unlink()


__all__ = ["SampleTier"]
