"""Protobuf's wire format, the few pieces a hand-framed message needs (wire.py): varints,
field keys, length-delimited and packed fields, and a walk over a message's fields."""

from __future__ import annotations

import numpy as np

from shardstream.proto.wire_values import WireError

VARINT, I64, LEN, I32 = 0, 1, 2, 5  # wire types
MASK64 = (1 << 64) - 1


def varint(value: int) -> bytes:
    value &= MASK64  # negative int64s are 10-byte two's complement, as protobuf does
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def key(field: int, wire_type: int) -> bytes:
    return varint((field << 3) | wire_type)


def int_field(field: int, value: int) -> bytes:
    return key(field, VARINT) + varint(value) if value else b""


def len_field(field: int, payload: bytes) -> bytes:
    return key(field, LEN) + varint(len(payload)) + payload


def packed(values: np.ndarray | list[int]) -> bytes:
    return b"".join(varint(int(v)) for v in values)


def read_varint(buf: memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise WireError("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise WireError("varint longer than 10 bytes")


def fields(buf: memoryview) -> list[tuple[int, int, int | memoryview]]:
    """(field, wire type, value) for every field; LEN values are views into buf."""
    out: list[tuple[int, int, int | memoryview]] = []
    pos = 0
    while pos < len(buf):
        key, pos = read_varint(buf, pos)
        field, wire_type = key >> 3, key & 7
        value: int | memoryview
        if wire_type == VARINT:
            value, pos = read_varint(buf, pos)
        elif wire_type == LEN:
            length, pos = read_varint(buf, pos)
            if pos + length > len(buf):
                raise WireError(f"field {field} claims {length} bytes, {len(buf) - pos} remain")
            value, pos = buf[pos : pos + length], pos + length
        elif wire_type == I64:
            value, pos = int.from_bytes(buf[pos : pos + 8], "little"), pos + 8
        elif wire_type == I32:
            value, pos = int.from_bytes(buf[pos : pos + 4], "little"), pos + 4
        else:
            raise WireError(f"unsupported wire type {wire_type} for field {field}")
        out.append((field, wire_type, value))
    if pos != len(buf):
        raise WireError("message ends inside a field")
    return out


def signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def unpack(buf: memoryview) -> list[int]:
    values, pos = [], 0
    while pos < len(buf):
        value, pos = read_varint(buf, pos)
        values.append(signed(value))
    return values


__all__ = ["I32", "I64", "LEN", "VARINT", "fields", "int_field", "key", "len_field", "packed", "read_varint",
           "signed", "unpack", "varint"]
