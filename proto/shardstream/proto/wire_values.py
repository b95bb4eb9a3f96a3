"""Batch values numpy has no dtype for, as they travel in a ``Tensor``: strings and bfloat16.

- ``str``: B strings as int64 offsets [B+1] (little-endian), then their UTF-8
  bytes; the client gives ``list[str]``, as DataLoader's default collate does.
- ``bfloat16``: 2-byte brain floats; on the service side their bits (uint16),
  on the client ``torch.bfloat16``.

The service builds either as a ``WireTensor`` (the bytes as they travel, and
the dtype and shape the client makes of them); wire.py frames it like any
array.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

STRINGS = "str"
BFLOAT16 = "bfloat16"
BFLOAT16_BITS = np.dtype("<u2")


class WireError(ValueError):
    """Bytes that are not a well-formed Batch message."""


@dataclass(frozen=True)
class WireTensor:
    """A batch value whose bytes travel under a dtype numpy has no name for: `data` is the bytes
    as they travel (packed strings as uint8, bfloat16 as its uint16 bits), `dtype` and `shape`
    what the client makes of them."""

    data: np.ndarray
    dtype: str
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes)


def pack_strings(values: Sequence[str]) -> WireTensor:
    """B strings as one ``str`` tensor: int64 offsets [B+1], then the UTF-8 bytes."""
    encoded = [value.encode("utf-8") for value in values]
    offsets = np.zeros(len(encoded) + 1, dtype="<i8")
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    data = np.empty(offsets.nbytes + int(offsets[-1]), dtype=np.uint8)
    data[: offsets.nbytes] = offsets.view(np.uint8)
    data[offsets.nbytes :] = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    return WireTensor(data, STRINGS, (len(encoded),))


def unpack_strings(name: str, count: int, data: memoryview) -> list[str]:
    """The `count` strings of tensor `name`'s data, checked against their offsets."""
    head = 8 * (count + 1)
    if len(data) < head:
        raise WireError(f"tensor {name!r}: {count} strings need {head} bytes of offsets, got {len(data)}")
    offsets = np.frombuffer(data[:head], dtype="<i8")
    payload = bytes(data[head:])
    if offsets[0] != 0 or offsets[-1] != len(payload) or (count and (np.diff(offsets) < 0).any()):
        raise WireError(f"tensor {name!r}: string offsets do not describe its {len(payload)} bytes")
    try:
        return [payload[a:b].decode("utf-8") for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist(),
                                                                strict=True)]
    except UnicodeDecodeError as exc:
        raise WireError(f"tensor {name!r} holds bytes that are not UTF-8: {exc}") from None


def bfloat16_bits(bits: np.ndarray) -> WireTensor:
    """bfloat16 values given as their bits (uint16/int16, any shape)."""
    data = np.ascontiguousarray(bits).view(BFLOAT16_BITS)
    return WireTensor(data, BFLOAT16, tuple(data.shape))


__all__ = ["BFLOAT16", "BFLOAT16_BITS", "STRINGS", "WireError", "WireTensor", "bfloat16_bits", "pack_strings",
           "unpack_strings"]
