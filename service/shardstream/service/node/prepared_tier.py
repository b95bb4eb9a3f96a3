"""One tier of the prepared-sample cache: a directory of chunk files, bounded in bytes.

Layout (one directory per dataset, that is per prepare identity)::

    free/<id>                  chunks given back by a dataset removed, to be claimed again
    <dataset>/<id>             chunks holding the dataset's entries, each appended to by one actor
    <dataset>/<shard>.index    where each row of one shard is (sample_index.py)

An entry (prepared_entry.py) carries its own key and checksum; this module stores and finds them,
the cache verifies each on reading. An actor appends a dataset's entries to a chunk of its own
(tier_chunks.py), claimed from ``free/`` by renaming it into the dataset's directory (one rename wins,
so the node's actors share a tier without locks) or allocated there, and records each entry in its
shard's index. The files outlive jobs and actors; after a node
restart an empty tier simply fills again.

A full tier admits nothing more rather than evicting the least recently used sample: each epoch
asks for every sample in a new order, so evicting by recency throws out entries just before they are
asked for, while keeping a fixed part of the dataset serves that part every epoch. Room is made only
by removing whole datasets that no actor used for ``STALE_DIRECTORY_S``: their chunks go back to
``free/``, allocated, for the next dataset.

Allocating a chunk is part of what a write costs, and the actor's write budget pays for it
(write_budget.py). A tier's space is not allocated ahead in idle time: with a process at idle
priority (``SCHED_IDLE``) doing it, the benchmark's first epoch on two busy cores ran 5-9% slower
(two runs each way), so the idle time was not free.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import random
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from shardstream.service.node.cache_fault import CacheFault
from shardstream.service.node.entry_frame import PREFIX
from shardstream.service.node.sample_index import ENTRY_ALIGN, SampleIndex, place_of, slot_of
from shardstream.service.node.tier_chunks import (
    CHUNK_BYTES,
    FREE,
    ChunkCache,
    OpenChunk,
    add_chunk,
    chunk_id,
    chunk_size_for,
    survey,
)

log = logging.getLogger(__name__)

LAYOUT = "chunks"  # the tier's files live in this subdirectory of its directory
STALE_DIRECTORY_S = 3600.0  # a dataset's entries unused this long may go to make room
FULL_RETRY_S = 30.0  # a tier found full and with nothing stale is not looked at again for this long
TOUCH_EVERY_S = 60.0  # how often an actor marks a dataset it reads from as used
MIN_CHUNK_BYTES = 4096  # a smaller file among the chunks is damage
READ_AHEAD = 4096  # the first read of an entry: a small one (a tokenized document) whole, in one call
READ_GROUP = 256  # entries read into one buffer (1 MiB) at a time
FIRST_CHUNK_BYTES = 1 << 20  # an actor's first chunk of a dataset; each next one twice the last, up to the tier's


@dataclass
class _Appending:
    """The chunk an actor appends one dataset's entries to."""

    chunk: int
    file: OpenChunk
    position: int = 0


def dataset_of(folder: str) -> str:
    return folder.split("/", 1)[0]


def _index_fault(exc: OSError) -> CacheFault:
    return CacheFault("io_error", f"the index: {type(exc).__name__}: {exc.strerror or exc}")


@functools.lru_cache(maxsize=4096)
def _chunk_path(root: str, dataset: str, chunk: int) -> str:
    return os.path.join(root, dataset, str(chunk))


class SampleTier:
    """One directory of prepared-sample chunks, bounded in bytes, shared by the node's actors."""

    def __init__(self, name: str, directory: str, max_bytes: int, chunk_bytes: int | None = None) -> None:
        self.name = name
        self.root = Path(directory) / LAYOUT
        self.max_bytes = max_bytes
        self._chunk_bytes = chunk_bytes  # None: sized from the bound (tier_chunks.chunk_size_for)
        self.root.mkdir(parents=True, exist_ok=True)
        _remove_file_per_sample_layout(Path(directory))
        self.index = SampleIndex(str(self.root))
        self._chunks = ChunkCache()
        self._lock = threading.Lock()
        self._appending: dict[str, _Appending] = {}
        self._allocated: dict[str, int] = {}  # dataset -> the size of the last chunk this actor allocated for it
        self.stored_bytes = self.allocated_bytes = 0
        self.claims = 0  # chunks this actor claimed for a dataset (`_claim`)
        self._count()  # what datasets hold; that and the free chunks
        self._full_until = 0.0
        self._touched: dict[str, float] = {}

    @property
    def chunk_bytes(self) -> int:
        return self._chunk_bytes or chunk_size_for(self.max_bytes)

    def accepting(self) -> bool:
        """False while the tier is treated as full (FULL_RETRY_S after it was found so)."""
        return time.monotonic() >= self._full_until

    def describe(self, folder: str, row: int) -> str:
        return f"{self.root}/{folder} row {row}"

    def _chunk_path(self, folder: str, chunk: int) -> str:
        return _chunk_path(str(self.root), dataset_of(folder), chunk)

    # -- reading

    def load_file(self, folder: str, row: int) -> tuple[np.ndarray, int] | None:
        """The row's entry as stored, copied out, unverified (the cache verifies it), and its slot
        (for `drop`); None when the tier does not hold it. CacheFault when it cannot be read whole;
        the row is then forgotten, so it is prepared and stored again."""
        try:
            slot = self.index.get(folder, row)
        except OSError as exc:
            raise _index_fault(exc) from exc
        return self.load_slot(folder, row, slot)

    def slots(self, wanted: list[tuple[str, np.ndarray]]) -> list[np.ndarray | CacheFault]:
        """Where the tier holds each of a shard's rows (0: not held), for `load_slot`, for each
        (folder, rows) of a batch at once: one read of each shard's index (the CacheFault of a
        folder whose index cannot be read in its place)."""
        return [_index_fault(found) if isinstance(found, OSError) else found
                for found in self.index.get_shards(wanted)]

    def load_slot(self, folder: str, row: int, slot: int) -> tuple[np.ndarray, int] | None:
        """`load_file` of a row whose slot was looked up already (0: None)."""
        if not slot:
            return None
        try:
            data = self._read(folder, *place_of(slot))
        except CacheFault:
            self.index.clear(folder, row, slot)
            raise
        self._touch(dataset_of(folder))
        return data, slot

    def load_slots(self, folder: str, rows: list[int], slots: list[int]) -> list[np.ndarray | CacheFault]:
        """`load_slot` of many of a shard's rows (slots nonzero): each entry as stored, unverified, or
        the CacheFault of one that cannot be read whole (its row then forgotten). Entries of up to
        READ_AHEAD bytes are read in one call each, READ_GROUP at a time under one hold of the chunks'
        lock, and copied out of the group's buffer: a batch of many small samples holds their bytes,
        not READ_AHEAD each."""
        root, dataset = str(self.root), dataset_of(folder)
        places = [place_of(slot) for slot in slots]
        entries: list[np.ndarray | CacheFault] = []
        for start in range(0, len(places), READ_GROUP):
            group = places[start:start + READ_GROUP]
            heads = self._chunks.read_many([(_chunk_path(root, dataset, chunk), offset) for chunk, offset in group],
                                           READ_AHEAD)
            for (chunk, offset), head, row, slot in zip(group, heads, rows[start:start + READ_GROUP],
                                                        slots[start:start + READ_GROUP], strict=True):
                try:
                    entries.append(self._read(folder, chunk, offset, head))
                except CacheFault as fault:
                    self.index.clear(folder, row, slot)
                    entries.append(fault)
        self._touch(dataset)
        return entries

    def drop(self, folder: str, row: int, slot: int) -> None:
        """Forget an entry refused on reading (unless another actor stored the row again meanwhile)."""
        self.index.clear(folder, row, slot)

    def _read(self, folder: str, chunk: int, offset: int, head: np.ndarray | OSError | None = None) -> np.ndarray:
        """The entry at `offset`: its first READ_AHEAD bytes (`head` when they were read already, or
        the error reading them raised), copied when the entry ends within them, else a second read
        of the whole entry."""
        path = _chunk_path(str(self.root), dataset_of(folder), chunk)
        try:
            data = self._chunks.read(path, offset, READ_AHEAD) if head is None else head
            if isinstance(data, OSError):
                raise data
            if len(data) < PREFIX.size:
                raise CacheFault("short_read", f"chunk {chunk} ends before the entry at {offset}")
            length = int(data[16:24].view("<u8")[0])  # PREFIX's whole length
            if length <= len(data):
                return data[:length].copy()
            data = self._chunks.read(path, offset, length)
        except OSError as exc:  # the chunk is gone, a directory in its place, a failing disk
            self._damaged_chunk(path)
            raise CacheFault("io_error", f"chunk {chunk}: {type(exc).__name__}: {exc.strerror or exc}") from exc
        if len(data) < length:
            self._damaged_chunk(path)
            raise CacheFault("short_read", f"read {len(data)} of {length} bytes")
        return data

    def _damaged_chunk(self, path: str) -> None:
        """Close a chunk found cut short or unreadable, and append nothing more to it."""
        self._chunks.forget(path)
        with self._lock:
            for dataset, appending in list(self._appending.items()):
                if appending.file.path == path:
                    del self._appending[dataset]
                    appending.file.close()

    def _touch(self, dataset: str) -> None:
        """Mark the dataset used (what decides which datasets may go when the tier is full)."""
        now = time.monotonic()
        if now - self._touched.get(dataset, -TOUCH_EVERY_S) >= TOUCH_EVERY_S:
            self._touched[dataset] = now
            with contextlib.suppress(OSError):
                os.utime(os.path.join(self.root, dataset))

    # -- writing

    def store(self, folder: str, row: int, parts: list[bytes | memoryview], size: int) -> bool:
        """Append the entry to this actor's chunk of the dataset and record it in the shard's index;
        False when the tier has no room for it."""
        if size > self.chunk_bytes or time.monotonic() < self._full_until:
            return False
        dataset = dataset_of(folder)
        try:
            with self._lock:  # held through the write: no other thread closes the chunk under it
                appending = self._appending.get(dataset)
                if appending is None or appending.position + size > appending.file.size:
                    claimed = self._claim(dataset, size)
                    if claimed is None:
                        return False
                    appending = self._appending[dataset] = claimed
                offset = appending.position
                appending.position += size + -size % ENTRY_ALIGN
                appending.file.write(offset, parts)
            self.index.set(folder, row, slot_of(appending.chunk, offset))
        except OSError as exc:
            log.warning("cannot write prepared samples to the %s tier under %s (%s): treating it as full for "
                        "%.0f s", self.name, self.root, exc, FULL_RETRY_S)
            self._full_until = time.monotonic() + FULL_RETRY_S
            return False
        return True

    def _claim(self, dataset: str, needed: int) -> _Appending | None:
        """A chunk for the dataset, opened for appending: a free one renamed into the dataset's
        directory, else one allocated now (its cost charged to the write budget, as the write's);
        None when the tier is full."""
        self.claims += 1
        directory = os.path.join(self.root, dataset)
        os.makedirs(directory, exist_ok=True)
        for chunk in self._free_chunks():
            try:
                os.rename(os.path.join(self.root, FREE, str(chunk)), os.path.join(directory, str(chunk)))
            except FileNotFoundError:
                continue  # another actor claimed it first
            appending = self._open_for_appending(dataset, chunk, needed)
            if appending is not None:
                return appending
        self._count()
        # Small first: a dataset of a few samples costs each actor a megabyte, not a whole chunk.
        size = min(self.chunk_bytes, max(FIRST_CHUNK_BYTES, 2 * self._allocated.get(dataset, 0), needed))
        if self.allocated_bytes + size <= self.max_bytes:
            self._allocated[dataset] = size
            try:
                return self._open_for_appending(dataset, add_chunk(str(self.root), size, into=dataset), needed)
            except OSError as exc:  # no space left on the filesystem, no permission
                log.warning("cannot allocate prepared-sample space in the %s tier under %s (%s): treating it as "
                            "full for %.0f s", self.name, self.root, exc, FULL_RETRY_S)
        elif self._make_room():
            return self._claim(dataset, needed)  # the chunks given back are free now
        self._full_until = time.monotonic() + FULL_RETRY_S
        return None

    def _open_for_appending(self, dataset: str, chunk: int, needed: int) -> _Appending | None:
        """The chunk, moved into the dataset's directory, opened to append `needed` bytes and more;
        None when it is gone, damaged, or too small (then it goes back to free/)."""
        path = os.path.join(self.root, dataset, str(chunk))
        try:
            file = OpenChunk(path, writable=True)
        except OSError:
            return None  # gone already (its dataset given back by another actor)
        if file.size < MIN_CHUNK_BYTES:  # not a chunk of a tier's making: damage
            file.close()
            with contextlib.suppress(OSError):
                os.unlink(path)
            return None
        if file.size < needed:  # a small chunk given back by another dataset: for a smaller entry
            file.close()
            with contextlib.suppress(OSError):
                os.rename(path, os.path.join(self.root, FREE, str(chunk)))
            return None
        self.stored_bytes += file.size  # (counted again from the files at the next allocation)
        previous = self._appending.pop(dataset, None)
        if previous is not None:
            previous.file.close()
        return _Appending(chunk, file)

    def _free_chunks(self) -> list[int]:
        with contextlib.suppress(FileNotFoundError):
            ids = [i for i in (chunk_id(e.name) for e in os.scandir(os.path.join(self.root, FREE))) if i is not None]
            random.shuffle(ids)  # actors claiming at once mostly try different chunks
            return ids
        return []

    def _count(self) -> None:
        now = survey(str(self.root))
        self.stored_bytes, self.allocated_bytes = now.claimed_bytes, now.allocated_bytes

    def _make_room(self) -> bool:
        """Give back the chunks of datasets unused for STALE_DIRECTORY_S, oldest first, until a chunk is
        free; False when none is stale."""
        datasets = []
        for entry in os.scandir(self.root):
            if entry.is_dir(follow_symlinks=False) and entry.name != FREE:
                with contextlib.suppress(FileNotFoundError):
                    datasets.append((entry.stat().st_mtime, entry.name))
        cutoff = time.time() - STALE_DIRECTORY_S
        freed = 0
        for used, dataset in sorted(datasets):
            if used >= cutoff or freed:
                break
            freed = self._give_back(dataset)
            log.info("prepared-sample %s tier full: gave back %s (%d chunks, unused since %s)", self.name, dataset,
                     freed, time.ctime(used))
        return freed > 0

    def _give_back(self, dataset: str) -> int:
        """Move a dataset's chunks to free/ (still allocated) and remove its indexes; the chunks moved."""
        directory = os.path.join(self.root, dataset)
        self.index.forget(dataset + "/")
        self._chunks.forget(directory + os.sep)
        appending = self._appending.pop(dataset, None)
        if appending is not None:
            appending.file.close()
        self._allocated.pop(dataset, None)
        moved = 0
        os.makedirs(os.path.join(self.root, FREE), exist_ok=True)
        for entry in list(os.scandir(directory)):
            chunk = chunk_id(entry.name)
            if chunk is not None:
                with contextlib.suppress(OSError):
                    os.rename(entry.path, os.path.join(self.root, FREE, entry.name))
                    moved += 1
        shutil.rmtree(directory, ignore_errors=True)
        self._count()
        return moved

    # -- for tests and tools

    def held(self) -> set[tuple[str, int]]:
        """(folder, row) of every entry the indexes record."""
        found: set[tuple[str, int]] = set()
        for dataset in os.scandir(self.root):
            if not dataset.is_dir(follow_symlinks=False) or dataset.name == FREE:
                continue
            for entry in os.scandir(dataset.path):
                if entry.name.endswith(".index"):
                    folder = f"{dataset.name}/{entry.name[:-len('.index')]}"
                    found.update((folder, row) for row in self.index.rows(folder))
        return found

    def locate(self, folder: str, row: int) -> tuple[str, int] | None:
        """The chunk file and offset of the row's entry, None when not held."""
        slot = self.index.get(folder, row)
        if not slot:
            return None
        chunk, offset = place_of(slot)
        return self._chunk_path(folder, chunk), offset

    def close(self) -> None:
        self.index.close()
        self._chunks.forget("")
        with self._lock:
            for appending in self._appending.values():
                appending.file.close()
            self._appending.clear()


def _remove_file_per_sample_layout(directory: Path) -> None:
    """Remove what an earlier version kept here (a directory of one file per sample, named by 32 hex
    digits, beside this layout's directory): it is never read again."""
    for entry in directory.iterdir():
        if entry.is_dir() and len(entry.name) == 32 and all(c in "0123456789abcdef" for c in entry.name):
            shutil.rmtree(entry, ignore_errors=True)


__all__ = ["CHUNK_BYTES", "STALE_DIRECTORY_S", "SampleTier", "dataset_of"]
