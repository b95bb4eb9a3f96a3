"""Keep freed batch-sized memory in the process instead of handing it back to the kernel.

Every batch passes through buffers of megabytes: the decode actors' output
arrays, the framed message, gRPC's copy of it. glibc serves blocks that large
with a fresh ``mmap`` and unmaps them on ``free``, so each batch pays a page
fault per 4 KiB page again (on the machines measured, more CPU than copying the
bytes). Raising the mmap and trim thresholds makes those blocks come from, and
go back to, the heap, where the next batch reuses them already mapped. The
service processes' memory then stays at their working set's high-water mark,
which is bounded by the credit windows and the decode-ahead depth.

Only the service's own processes (``serve`` and the decode actors) do this;
the client never changes the allocator of a training process.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
THRESHOLD_BYTES = 1 << 30
FALLBACK_MMAP_THRESHOLD_BYTES = 32 << 20  # the most older glibc versions accept


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds; False where the C library isn't glibc."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        log.debug("no glibc mallopt (%s): allocator left as it is", name)
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mmap_ok = bool(mallopt(_M_MMAP_THRESHOLD, THRESHOLD_BYTES)) or bool(
        mallopt(_M_MMAP_THRESHOLD, FALLBACK_MMAP_THRESHOLD_BYTES))
    done = mmap_ok and bool(mallopt(_M_TRIM_THRESHOLD, THRESHOLD_BYTES))
    log.debug("glibc mmap and trim thresholds raised: %s", done)
    return done


__all__ = ["THRESHOLD_BYTES", "keep_freed_memory"]
