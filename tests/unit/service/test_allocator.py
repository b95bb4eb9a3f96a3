"""The service's allocator tuning: batch-sized blocks come from the heap, not from fresh mmaps."""

from __future__ import annotations

import ctypes
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                                reason="mallopt is glibc's")

# mallinfo2().hblks: how many blocks the allocator currently holds as separate mmaps.
_PROBE = """
import ctypes, sys
import numpy as np
from shardstream.service.allocator import keep_freed_memory

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
        "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
if sys.argv[1] == "tuned":
    assert keep_freed_memory()
before = libc.mallinfo2().hblks
block = np.empty(8 << 20, np.uint8)
print(libc.mallinfo2().hblks - before)
"""


def _mmapped_blocks_for_one_batch(mode: str) -> int:
    done = subprocess.run([sys.executable, "-c", _PROBE, mode], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.strip())


def test_batch_sized_blocks_come_from_the_heap_once_tuned() -> None:
    if not hasattr(ctypes.CDLL(None), "mallinfo2"):
        pytest.skip("glibc older than 2.33 has no mallinfo2")
    assert _mmapped_blocks_for_one_batch("default") == 1  # glibc's default: a fresh mmap
    assert _mmapped_blocks_for_one_batch("tuned") == 0
