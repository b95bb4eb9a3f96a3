"""What each Arrow column type becomes in a batch without a transform: the one table.

A column's tensor type is decided by the dataset's schema when the job opens,
never by the values of one row group, so every batch of a column has the same
dtype whatever nulls or values it holds (docs/formats.md, "Values and dtypes"):

=====================================  ========================================
Arrow type                             batch value
=====================================  ========================================
bool                                   torch.bool [B]
int8/16/32/64, uint8/16/32/64          the same torch dtype [B]
float16/32/64                          the same torch dtype [B] (null: NaN)
timestamp, duration, date64, time64    torch.int64 [B]: the stored count of its unit
date32, time32                         torch.int32 [B]: the stored count of its unit
fixed_size_list<number>[k]             [B, k] of the number's dtype
list / large_list<number> ("pad")      [B, Lmax] (+ <column>_lengths int64 [B])
list<fixed_size_list<number>[k]>       [B, Lmax, k] ("pad")
string, large_string, dictionary<str>  list[str]
dictionary<number>                     the number's dtype, decoded
anything else (decimal, binary,        refused at open: InvalidJobSpec naming the
struct, map, null, list<str>)          column and its type
=====================================  ========================================
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shardstream.proto.errors import InvalidJobSpec

SCALAR, FIXED, LIST, STRINGS = "scalar", "fixed", "list", "strings"
MASK_SUFFIX = "_mask"  # nulls="mask": <column>_mask, True where the row holds a value


@dataclass(frozen=True)
class TensorType:
    """What a column becomes: its `kind` (SCALAR [B], FIXED [B, k], LIST [B, Lmax(, k)], STRINGS),
    the numbers' dtype (None for strings) and the fixed width `width` (k; 0 when none)."""

    kind: str
    dtype: np.dtype | None = None
    width: int = 0

    @property
    def floats(self) -> bool:
        return self.dtype is not None and self.dtype.kind == "f"


# Arrow's temporal types travel as the integers they are stored as.
_STORED_AS = {8: pa.int64(), 4: pa.int32()}


def tensor_type(field: pa.Field, pads: bool = False) -> TensorType:
    """The tensor type of `field`; InvalidJobSpec naming the column and its type when it has
    none (or, without `pads`, for variable-length lists)."""
    kind = _decoded(field.type)
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return TensorType(STRINGS)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        if not pads:
            raise InvalidJobSpec(f"column {field.name!r} holds lists of varying length ({field.type}): collate='pad' "
                                 "pads them to the batch's longest (with <column>_lengths)")
        inner = _decoded(kind.value_type)
        if pa.types.is_fixed_size_list(inner):
            return TensorType(LIST, _number_dtype(field, _decoded(inner.value_type)), inner.list_size)
        return TensorType(LIST, _number_dtype(field, inner))
    if pa.types.is_fixed_size_list(kind):
        return TensorType(FIXED, _number_dtype(field, _decoded(kind.value_type)), kind.list_size)
    return TensorType(SCALAR, _number_dtype(field, kind))


def _decoded(kind: pa.DataType) -> pa.DataType:
    """A dictionary's value type (its values arrive decoded); any other type as it is."""
    return kind.value_type if pa.types.is_dictionary(kind) else kind


def _number_dtype(field: pa.Field, kind: pa.DataType) -> np.dtype:
    if pa.types.is_boolean(kind):
        return np.dtype(np.bool_)
    if pa.types.is_integer(kind) or pa.types.is_floating(kind):
        return np.dtype(kind.to_pandas_dtype())
    if _temporal(kind):
        return np.dtype(_STORED_AS[kind.bit_width // 8].to_pandas_dtype())
    raise InvalidJobSpec(
        f"column {field.name!r} has type {field.type}, which does not travel as a tensor without a transform "
        "(numbers, bools, timestamps, strings and lists of numbers do): leave it out with columns=[...], "
        "cast it when writing the dataset, or choose a transform"
    )


def _temporal(kind: pa.DataType) -> bool:
    return bool(pa.types.is_timestamp(kind) or pa.types.is_date(kind) or pa.types.is_time(kind)
                or pa.types.is_duration(kind))


def number_values(array: pa.Array, dtype: np.dtype) -> np.ndarray:
    """A flat array of numbers (bool, int, float, temporal, or a dictionary of them) as numpy of
    `dtype`: without a copy where Arrow's layout allows; nulls as NaN (floats) or 0 / False
    (where the caller has dealt with them: refused, or masked)."""
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    if _temporal(array.type):
        array = array.view(_STORED_AS[array.type.bit_width // 8])
    if array.null_count and dtype.kind != "f":
        array = pc.fill_null(array, pa.scalar(False if dtype.kind == "b" else 0, array.type))
    values = np.asarray(array.to_numpy(zero_copy_only=False))
    if values.dtype != dtype:  # the table's promise: never a silent conversion
        raise TypeError(f"{array.type} values became {values.dtype}, not {dtype}")
    return values


def string_values(array: pa.Array) -> list[str]:
    """A string column (plain, large or dictionary) as Python strings; a null as ""."""
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    if array.null_count:
        array = pc.fill_null(array, "")
    return [str(value) for value in array.to_pylist()]


def mask_name(column: str) -> str:
    return f"{column}{MASK_SUFFIX}"


__all__ = ["FIXED", "LIST", "MASK_SUFFIX", "SCALAR", "STRINGS", "TensorType", "mask_name", "number_values",
           "string_values", "tensor_type"]
