"""No transform: columns straight to batch arrays, vectorised.

Each column's tensor type comes from the dataset's schema (values.py: the
Arrow -> torch table), never from the values of one row group: every batch of
a column has the same dtype. Scalar columns become [B] arrays and fixed-size
list columns [B, k]; strings and variable-length lists are gathered apart
(`gather_variable`).

Nulls (docs/formats.md, "Values and dtypes"): a float's null is NaN, as
pyarrow's ``to_numpy`` gives it. Any other null (an integer's, a bool's, a
string, a list) is refused, unless the job masks nulls (``masks``): then the
row holds 0 / False / "" / an empty list and ``<column>_mask`` (bool [B]) is
False there. A null inside a list that is not a float is refused either way.
A refused row raises `BadValue` naming the column and the row's place in the
batch (node/batching.py names its file and row).

Each cached row group is viewed as a numpy array without copying where
Arrow's layout allows (a column with nulls is copied once, with its nulls
filled), and the batch's rows are gathered straight into one array per
column: a single copy of every byte. On the batch server's path those arrays
are the tensors' places in the message that is sent (wire.BatchFrame), so
that copy is the only one before gRPC's.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from shardstream.proto.wire import TensorSpec
from shardstream.proto.wire_values import WireTensor, pack_strings
from shardstream.service.transforms.pieces import Piece, rows_in_batch_order
from shardstream.service.transforms.values import (
    FIXED,
    SCALAR,
    STRINGS,
    TensorType,
    mask_name,
    number_values,
    string_values,
    tensor_type,
)

NULL_ROW = "holds a null (nulls='mask' delivers it with {mask})"
NULL_INSIDE = "holds a null inside its list, which its tensor ({dtype}) has no place for"


class BadValue(ValueError):
    """A value of the batch that cannot travel: `column`, and `position`, its row's place in the
    batch; the message says why."""

    def __init__(self, column: str, position: int, why: str) -> None:
        super().__init__(f"column {column!r} {why}")
        self.column, self.position = column, position


def check_schema(schema: pa.Schema, pads: bool = False) -> None:
    """Every column has a tensor type (values.py), or InvalidJobSpec names it."""
    for field in schema:
        tensor_type(field, pads)


def variable_columns(schema: pa.Schema) -> list[str]:
    """Columns whose rows differ in size (strings, lists): gathered by `gather_variable`, not framed
    ahead."""
    return [field.name for field in schema if _is_variable(field.type)]


def _is_variable(kind: pa.DataType) -> bool:
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    return bool(pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_list(kind)
                or pa.types.is_large_list(kind))


def gather_variable(pieces: Sequence[Piece], count: int, names: Sequence[str], pad_value: float,
                    masks: bool = False) -> dict[str, np.ndarray | WireTensor]:
    """The variable-size columns of the batch: strings packed, lists padded to the longest (with
    `<column>_lengths`); with `masks`, `<column>_mask` after each."""
    table = rows_in_batch_order(pieces, names)
    out: dict[str, np.ndarray | WireTensor] = {}
    for name in names:
        column = table.column(name).combine_chunks()
        kind = tensor_type(table.schema.field(name), pads=True)
        null_rows = column.is_null().to_numpy(zero_copy_only=False) if column.null_count else None
        if null_rows is not None and not masks:
            raise BadValue(name, int(np.argmax(null_rows)), NULL_ROW.format(mask=mask_name(name)))
        if kind.kind == STRINGS:
            out[name] = pack_strings(string_values(column))
        else:
            out[name], out[f"{name}_lengths"] = _padded(name, column, kind, count, pad_value)
        if masks:
            out[mask_name(name)] = _valid(null_rows, count)
    return out


def _padded(name: str, column: pa.Array, kind: TensorType, count: int,
            pad_value: float) -> tuple[np.ndarray, np.ndarray]:
    """A list column as [count, Lmax(, k)] padded with `pad_value`, and its lengths (a null: 0)."""
    lengths = column.value_lengths()
    lengths = np.asarray((lengths.fill_null(0) if lengths.null_count else lengths)
                         .to_numpy(zero_copy_only=False), dtype=np.int64)
    element = TensorType(FIXED if kind.width else SCALAR, kind.dtype, kind.width)
    values, elements, inside = _numbers(column.flatten(), element)  # [total] or [total, k]
    rows = np.repeat(np.arange(count), lengths)
    if elements is not None and not kind.floats:  # a null element: NaN for floats, else refused
        inside = elements if inside is None else elements | inside
    if inside is not None and inside.any():
        raise BadValue(name, int(rows[np.argmax(inside)]), NULL_INSIDE.format(dtype=kind.dtype))
    padded = np.full((count, int(lengths.max()) if count else 0, *values.shape[1:]), pad_value,
                     dtype=values.dtype)
    places = np.arange(len(values)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    padded[rows, places] = values
    return padded, lengths


def _valid(null_rows: np.ndarray | None, count: int) -> np.ndarray:
    return np.ones(count, dtype=np.bool_) if null_rows is None else ~null_rows


def column_specs(schema: pa.Schema, count: int, masks: bool = False) -> list[TensorSpec]:
    """The arrays `gather_arrays` makes of a batch of `count` rows of `schema`'s fixed-size
    columns, before making them: dtypes and shapes from the schema alone."""
    specs = []
    for field in schema:
        if _is_variable(field.type):
            continue
        kind = tensor_type(field)
        assert kind.dtype is not None  # numbers: strings are variable
        specs.append(TensorSpec(field.name, kind.dtype, (count, kind.width) if kind.width else (count,)))
        if masks:
            specs.append(TensorSpec(mask_name(field.name), np.dtype(np.bool_), (count,)))
    return specs


def gather_arrays(pieces: Sequence[Piece], count: int, out: Mapping[str, np.ndarray] | None = None,
                  masks: bool = False) -> dict[str, np.ndarray]:
    """The batch of `count` rows that `pieces` describe, one array per fixed-size column (and with
    `masks` its `<column>_mask` after it), in column order: written into `out` (arrays shaped as
    `column_specs` says) when given, else new arrays."""
    if not pieces:
        raise ValueError("a batch needs at least one row")
    specs = column_specs(pieces[0].table.schema, count, masks)
    arrays = dict(out) if out is not None else {s.name: np.empty(s.shape, dtype=s.dtype) for s in specs}
    names = [field.name for field in pieces[0].table.schema if not _is_variable(field.type)]
    columns = [(name, arrays[name], arrays[mask_name(name)] if masks else None) for name in names]
    for piece in pieces:  # a piece's views looked up once for all its columns
        views = _column_views(piece.table)
        one_row = len(piece.at) == 1  # most pieces of a shuffled batch
        if one_row:
            position, row = int(piece.at[0]), int(piece.rows[0])
        for name, batch, mask in columns:
            view = views[name]
            refused = view.refused_masked if masks else view.refused
            if refused is not None and refused[piece.rows].any():
                first = int(np.argmax(refused[piece.rows]))
                raise BadValue(name, int(piece.at[first]), view.why(name, int(piece.rows[first])))
            if one_row:
                batch[position] = view.values[row]
                if mask is not None:
                    mask[position] = view.valid is None or view.valid[row]
            else:
                _gather_into(batch, view.values, piece.rows, piece.at)
                if mask is not None:
                    if view.valid is None:
                        mask[piece.at] = True
                    else:
                        _gather_into(mask, view.valid, piece.rows, piece.at)
    return {spec.name: arrays[spec.name] for spec in specs}


@dataclass(frozen=True)
class ColumnView:
    """One column of a row group as the batch takes it: `values` [n] or [n, k] (nulls filled),
    `valid` (False where the row is null; None: no null row), and the rows refused without
    masks (`refused`) and with them (`refused_masked`); None: no such row."""

    values: np.ndarray
    valid: np.ndarray | None
    refused: np.ndarray | None
    refused_masked: np.ndarray | None  # nulls inside a list that is not of floats
    kind: TensorType

    def why(self, name: str, row: int) -> str:
        if self.valid is not None and not self.valid[row]:
            return NULL_ROW.format(mask=mask_name(name))
        return NULL_INSIDE.format(dtype=self.kind.dtype)


# id(row group table) -> (a weak reference to it, its columns' views). A shuffled batch takes a row
# or two from each of dozens of row groups, which stay cached for the epoch: their views are made
# once per table, not once per batch. An entry goes when its table is freed.
_VIEWS: dict[int, tuple[weakref.ref[pa.Table], dict[str, ColumnView]]] = {}
_VIEWS_LOCK = threading.Lock()


def _column_views(table: pa.Table) -> dict[str, ColumnView]:
    """Each fixed-size column of `table` as its ColumnView."""
    key = id(table)
    with _VIEWS_LOCK:
        entry = _VIEWS.get(key)
        if entry is not None and entry[0]() is table:
            return entry[1]
    views = {}
    for field in table.schema:
        if _is_variable(field.type):
            continue  # gather_variable's
        column = table.column(field.name)
        array = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
        kind = tensor_type(field)
        values, null_rows, inside = _numbers(array, kind)
        # A float's null is NaN; any other null row is refused unless masked.
        refused = inside if kind.floats or null_rows is None else null_rows if inside is None else null_rows | inside
        views[field.name] = ColumnView(values, None if null_rows is None else ~null_rows, refused, inside, kind)
    with _VIEWS_LOCK:
        _VIEWS[key] = (weakref.ref(table, lambda _ref: _forget(key, _ref)), views)
    return views


def _forget(key: int, ref: weakref.ref[pa.Table]) -> None:
    with _VIEWS_LOCK:
        entry = _VIEWS.get(key)
        if entry is not None and entry[0] is ref:
            del _VIEWS[key]


def _list_values(array: pa.FixedSizeListArray) -> pa.Array:
    """The values of every slot, null slots included (``flatten`` would drop those)."""
    width = array.type.list_size
    return array.values.slice(array.offset * width, len(array) * width)


def _numbers(array: pa.Array, kind: TensorType) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """(values [n] or [n, k] of `kind`'s dtype, the rows that are null, the rows holding a null
    inside their fixed-size list that is not a float): a null row's values are NaN (floats) or 0."""
    assert kind.dtype is not None
    null_rows = array.is_null().to_numpy(zero_copy_only=False) if array.null_count else None
    if not kind.width:
        return number_values(array, kind.dtype), null_rows, None
    slots = _list_values(array)
    values = number_values(slots, kind.dtype).reshape(len(array), kind.width)
    inside = None
    if slots.null_count:
        inside = slots.is_null().to_numpy(zero_copy_only=False).reshape(len(array), kind.width).any(axis=1)
        if null_rows is not None:
            inside &= ~null_rows  # a null row's slots are not values
        inside = None if kind.floats or not inside.any() else inside
    if null_rows is not None:
        values = values.copy()
        values[null_rows] = np.nan if kind.floats else 0
    return values, null_rows, inside


# A row at least this large is copied on its own when a piece's rows are scattered over the batch:
# fancy indexing would copy them into a temporary first, then into place.
ROW_BY_ROW_BYTES = 4096


def _gather_into(batch: np.ndarray, source: np.ndarray, rows: np.ndarray, at: np.ndarray) -> None:
    """batch[at] = source[rows], each byte copied once. `at` is ascending; `rows` are valid."""
    if not len(at):
        return
    if at[-1] - at[0] + 1 == len(at):  # a contiguous run of the batch
        into = batch[at[0] : at[0] + len(at)]
        if len(rows) == 1 or bool((np.diff(rows) == 1).all()):
            np.copyto(into, source[rows[0] : rows[0] + len(rows)])  # and of the row group
        else:
            np.take(source, rows, axis=0, out=into, mode="clip")  # "raise" would copy via a temporary
    elif source[:1].nbytes >= ROW_BY_ROW_BYTES:
        for position, row in zip(at.tolist(), rows.tolist(), strict=True):
            batch[position] = source[row]
    else:
        batch[at] = source[rows]


__all__ = ["BadValue", "ColumnView", "check_schema", "column_specs", "gather_arrays", "gather_variable", "variable_columns"]
