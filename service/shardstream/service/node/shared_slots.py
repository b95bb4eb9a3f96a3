"""A decode actor's side of shared-memory delivery: batches written into the rank's own slots.

When a rank runs on the decoder's host it offers, with each want, a slot: a
file it made in /dev/shm (client/shared_slots.py). The actor opens the file,
removes its name (from then on only the two processes' descriptors reach
it, so nothing outlives them), sizes it to the batch and frames the batch
straight into it; the stream carries a small message naming the slot. The
bytes never cross a socket: no gRPC copies, no kernel copies, and the rank's
tensors are views of the slot (docs/data-plane.md).

A slot that cannot be opened (the rank is on another host, in another
container, or another user's) turns the stream back to sending bytes: the
batch is framed into a new ``bytes`` object as usual.
"""

from __future__ import annotations

import logging
import mmap
import os
import stat
from typing import Any

import numpy as np

from shardstream.proto.errors import StreamProtocolError
from shardstream.proto.slots import SHARED_MEMORY_DIR, SLOT_NAME
from shardstream.proto.wire import SharedRef
from shardstream.proto.writable_bytes import writable_bytes

log = logging.getLogger(__name__)

_POPULATE = getattr(mmap, "MAP_POPULATE", 0)  # Linux


class _Slot:
    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.mapping: mmap.mmap | None = None

    def array(self, size: int) -> np.ndarray:
        """A writable view of the slot's first `size` bytes, growing the file when it is smaller.

        Grown with fallocate, not ftruncate: a full /dev/shm then refuses here (OSError), where
        writing through a mapping of pages it cannot provide would kill the process (SIGBUS)."""
        if self.mapping is None or len(self.mapping) < size:
            if os.fstat(self.fd).st_size < size:
                os.posix_fallocate(self.fd, 0, size)
            # Mapped with its pages at once: writing a batch into a new mapping otherwise costs a page
            # fault per 4 KiB the first time (2,350 of them for a 9.6 MB batch). A batch still viewing
            # the old mapping keeps it.
            self.mapping = mmap.mmap(self.fd, size, flags=mmap.MAP_SHARED | _POPULATE)
        return np.frombuffer(self.mapping, dtype=np.uint8, count=size)


class StreamSlots:
    """One FetchBatches stream's slots: opened on first use, kept until the stream ends."""

    def __init__(self, directory: str = SHARED_MEMORY_DIR) -> None:
        self._directory = directory
        self._slots: dict[str, _Slot] = {}
        self.usable = True  # False once a slot could not be opened: the rank cannot share memory with us

    def allocator(self, name: str) -> Any:
        """The ``wire.Allocate`` for a want naming slot `name`: the slot, else a new ``bytes``."""
        if not SLOT_NAME.fullmatch(name):
            raise StreamProtocolError(f"want names shared-memory slot {name!r}, which is not a slot name "
                                      f"(expected {SLOT_NAME.pattern})")

        def allocate(size: int) -> tuple[Any, np.ndarray]:
            slot = self._open(name) if self.usable else None
            if slot is None:
                return writable_bytes(size)
            try:
                return SharedRef(name, size), slot.array(size)
            except OSError as exc:  # /dev/shm full: send this one on the stream
                log.warning("cannot write a %d-byte batch into shared-memory slot %s (%s): sending it on "
                            "the stream", size, name, exc)
                return writable_bytes(size)

        return allocate

    def _open(self, name: str) -> _Slot | None:
        slot = self._slots.get(name)
        if slot is not None:
            return slot
        path = os.path.join(self._directory, name)
        try:
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            log.debug("shared-memory slot %s cannot be opened here (%s): this stream sends bytes", path, exc)
            self.usable = False
            return None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            self.usable = False
            return None
        try:
            os.unlink(path)  # only the two processes reach it now
        except OSError:
            pass
        slot = self._slots[name] = _Slot(fd)
        return slot

    def close(self) -> None:
        """Close the descriptors; a mapping goes when the last batch viewing it does."""
        for slot in self._slots.values():
            os.close(slot.fd)
        self._slots.clear()


__all__ = ["StreamSlots"]
