"""A new ``bytes`` object that can be filled in place before anyone else sees it.

gRPC's Python API sends ``bytes`` and nothing else (not ``bytearray``, not a
``memoryview``), and Python has no writable view of a ``bytes`` object, so a
message built in a ``bytearray`` or from numpy arrays costs a full copy into
``bytes`` before gRPC's own copy. This module allocates the object with
CPython's ``PyBytes_FromStringAndSize(NULL, size)``, which the C API documents
for exactly this (uninitialised contents, to be filled by the caller before
the object is shared), and returns a writable numpy array over its buffer.

The array keeps the ``bytes`` object alive. Whoever fills it must be done
before handing the object on: ``bytes`` are immutable to everyone else (their
hash is cached, equal objects may be shared).
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

import numpy as np


@functools.cache
def _c_api() -> tuple[Any, Any]:
    """(PyBytes_FromStringAndSize, PyBytes_AsString) of the running CPython."""
    api = ctypes.pythonapi  # CPython only (Ray, which runs the service, is CPython only)
    new = api.PyBytes_FromStringAndSize
    new.restype, new.argtypes = ctypes.py_object, [ctypes.c_char_p, ctypes.c_ssize_t]
    address = api.PyBytes_AsString
    address.restype, address.argtypes = ctypes.c_void_p, [ctypes.py_object]
    return new, address


def writable_bytes(size: int) -> tuple[bytes, np.ndarray]:
    """A new ``bytes`` object of `size` uninitialised bytes, and a writable uint8 array over them."""
    if size < 0:
        raise ValueError(f"size must be >= 0, got {size}")
    if size == 0:
        return b"", np.empty(0, dtype=np.uint8)
    new, address = _c_api()
    data: bytes = new(None, size)
    buffer = (ctypes.c_uint8 * size).from_address(address(data))
    buffer.owner = data  # type: ignore[attr-defined]  # the array's base holds the object alive
    return data, np.frombuffer(memoryview(buffer), dtype=np.uint8)


__all__ = ["writable_bytes"]
