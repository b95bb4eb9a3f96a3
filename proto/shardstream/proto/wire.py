"""Tensors on the wire: raw C-contiguous bytes plus dtype and shape.

No pickle: a ``Tensor`` message is ``(name, dtype, shape, data)`` and either
side rebuilds the array with ``frombuffer``. Only the dtypes below travel;
anything else is refused when the batch is built, not when it is read.
"""

from __future__ import annotations

import numpy as np

from shardstream.proto.v1 import loader_pb2 as pb

# numpy dtype name -> the torch dtype name of the same layout.
WIRE_DTYPES: dict[str, str] = {
    "bool": "bool",
    "uint8": "uint8",
    "int8": "int8",
    "int16": "int16",
    "int32": "int32",
    "int64": "int64",
    "float16": "float16",
    "float32": "float32",
    "float64": "float64",
}


def encode_array(name: str, array: np.ndarray) -> pb.Tensor:
    """One numpy array as a Tensor message (copies only if not contiguous)."""
    dtype = array.dtype.name
    if dtype not in WIRE_DTYPES:
        raise TypeError(f"column {name!r} has dtype {dtype}, which cannot travel as a tensor")
    if not array.flags.c_contiguous:
        array = array.copy(order="C")  # (np.ascontiguousarray would turn 0-d into 1-d)
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    return pb.Tensor(name=name, dtype=dtype, shape=list(array.shape), data=array.tobytes())


def decode_array(tensor: pb.Tensor) -> np.ndarray:
    """A read-only numpy view over a Tensor message's bytes."""
    if tensor.dtype not in WIRE_DTYPES:
        raise TypeError(f"tensor {tensor.name!r} has unknown dtype {tensor.dtype!r}")
    return np.frombuffer(tensor.data, dtype=tensor.dtype).reshape(tuple(tensor.shape))


__all__ = ["WIRE_DTYPES", "decode_array", "encode_array"]
