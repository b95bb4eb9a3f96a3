"""No transform: numeric columns straight to batch arrays, vectorised.

Scalar columns become [B] arrays and fixed-size list columns [B, k], keeping
the column's dtype. Nulls are refused: a tensor has no place for them.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from shardstream.proto.errors import CorruptSample
from shardstream.service.transforms.base import check_tensor_column


def check_schema(schema: pa.Schema) -> None:
    for field in schema:
        check_tensor_column(field)


def table_to_arrays(table: pa.Table) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for name, column in zip(table.column_names, table.columns, strict=True):
        out[name] = column_to_array(name, column)
    return out


def column_to_array(name: str, column: pa.ChunkedArray) -> np.ndarray:
    if column.null_count:
        raise CorruptSample(f"column {name!r} has {column.null_count} null value(s) in this batch")
    array = column.combine_chunks()
    if pa.types.is_fixed_size_list(array.type):
        width = array.type.list_size
        flat = array.flatten()
        if flat.null_count:
            raise CorruptSample(f"column {name!r} has {flat.null_count} null value(s) inside its lists in this batch")
        values = flat.to_numpy(zero_copy_only=False)
        return values.reshape(len(array), width)
    return np.asarray(array.to_numpy(zero_copy_only=False))


__all__ = ["check_schema", "column_to_array", "table_to_arrays"]
