"""A rank's receive buffers for batch bytes from bulk sockets: few, reused, and given back to the OS.

One pool per loader, shared by every decoder's bulk socket and every epoch,
so what a rank keeps is bounded by its window, not by how many decoders or
epochs it has seen (an ended stream, which only the cycle collector may free,
holds no buffer):

- **Bounded.** The pool keeps at most ``keep`` buffers, free or leased: the
  loader's window in batches, plus the batch a training loop's variable still
  holds while it asks for the next. The scheduler never has more batches
  received and not consumed than the window, and a buffer is mapped only when
  no free one fits, so in steady state the pool is the window's batches and
  no more. A lease is never refused. A batch the loop keeps longer (older
  than the last ``keep`` leases) is the loop's memory: it no longer counts
  against ``keep``, and its buffer comes back to the pool, if there is room,
  when its tensors are gone.
- **Reused only when nothing views it.** A lease is an array over a buffer;
  the tensors of its batch view it, and the buffer becomes free again only
  when the last of them is gone (a ``weakref.finalize`` on the lease). A
  batch a training loop keeps is never overwritten.
- **Outside malloc.** Each buffer is its own anonymous ``mmap``, unmapped
  when the pool drops it. Batch-sized blocks from malloc stayed resident
  after they were freed: once glibc frees one mmapped block it raises its
  mmap threshold above that size, so later blocks came from its heaps (one
  arena per fetch thread, new threads each epoch), which it rarely gives back.
  The rank grew by about a window per epoch (docs/data-plane.md has the
  measurement). Pages of a buffer the kernel never wrote are not resident,
  so rounding a buffer up costs no memory (with transparent huge pages on
  for every mapping, at most the rest of the huge page a batch ends in).
"""

from __future__ import annotations

import mmap
import threading
import weakref

import numpy as np

# A buffer is rounded up to 1/16 of its size's power of two (a page at least), so batches whose
# sizes differ a little (variable-length samples) reuse each other's buffers.
SIZE_STEPS = 16


class ReceiveBuffers:
    """Buffers handed out as arrays, each free again once nothing views it. The pool keeps at most
    `keep` buffers: free ones, and those of the last `keep` leases that something still views."""

    def __init__(self, keep: int) -> None:
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        self.keep = keep
        self._lock = threading.Lock()
        self._free: list[np.ndarray] = []  # by capacity, smallest first
        self._serial = 0  # leases so far
        self._live: set[int] = set()  # the serials of leases something still views
        self._closed = False
        self.mapped = 0  # buffers mapped so far (a reused one is not counted again)

    def lease(self, size: int) -> np.ndarray:
        """`size` writable bytes, viewing a buffer no other lease views."""
        with self._lock:
            self._serial += 1
            serial = self._serial
            block = self._take(size)
            self._live.add(serial)
            if block is None:
                self.mapped += 1
        if block is None:
            block = _map(capacity(size))
        lease = block[:size]
        weakref.finalize(lease, self._release, block, serial).atexit = False
        return lease

    @property
    def leased(self) -> int:
        """Buffers some lease (and so some tensor) still views."""
        with self._lock:
            return len(self._live)

    @property
    def free(self) -> int:
        """Buffers kept for the next leases."""
        with self._lock:
            return len(self._free)

    def close(self) -> None:
        """Drop the free buffers, and each leased one once nothing views it."""
        with self._lock:
            self._closed = True
            self._free.clear()

    def _in_window(self) -> int:
        """Live leases among the last `keep` (holding the lock). An older one that is still viewed is
        a batch the training loop keeps beyond the window: its memory, not the pool's, so it does
        not make the pool drop and map a buffer for every batch after it."""
        return sum(1 for serial in self._live if serial > self._serial - self.keep)

    def _take(self, size: int) -> np.ndarray | None:
        """The smallest free buffer that fits (holding the lock, the new lease counted in `_serial`
        but not yet live). None: map a new one; to stay within `keep`, the smallest free ones, which
        fit no lease this large, are dropped first."""
        for i, block in enumerate(self._free):
            if len(block) >= size:
                return self._free.pop(i)
        while self._free and self._in_window() + 1 + len(self._free) > self.keep:
            self._free.pop(0)
        return None

    def _release(self, block: np.ndarray, serial: int) -> None:
        with self._lock:
            self._live.discard(serial)
            if self._closed or self._in_window() + len(self._free) >= self.keep:
                return  # dropped: unmapped with its last reference
            at = next((i for i, kept in enumerate(self._free) if len(kept) > len(block)), len(self._free))
            self._free.insert(at, block)


def capacity(size: int) -> int:
    """The bytes mapped for a batch of `size`: rounded up to a step of its size class."""
    step = max(mmap.PAGESIZE, (1 << max(size.bit_length() - 1, 0)) // SIZE_STEPS)
    return max(step, -(-size // step) * step)


def _map(nbytes: int) -> np.ndarray:
    """An anonymous private mapping as bytes; unmapped when the array and its views are gone."""
    return np.frombuffer(mmap.mmap(-1, nbytes), dtype=np.uint8)


__all__ = ["SIZE_STEPS", "ReceiveBuffers", "capacity"]
