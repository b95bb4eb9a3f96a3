"""No transform: numeric columns straight to batch arrays, vectorised.

Scalar columns become [B] arrays and fixed-size list columns [B, k], keeping
the column's dtype. Nulls are refused: a tensor has no place for them.

Each cached row group is viewed as a numpy array without copying, and the
batch's rows are gathered straight into one array per column: a single copy
of every byte. On the batch server's path those arrays are the tensors' places
in the message that is sent (wire.BatchFrame), so that copy is the only one
before gRPC's.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa

from shardstream.proto.errors import CorruptSample
from shardstream.proto.wire import TensorSpec
from shardstream.proto.wire_values import WireTensor, pack_strings
from shardstream.service.node.reader import Piece, rows_in_batch_order
from shardstream.service.transforms.base import check_tensor_column


def check_schema(schema: pa.Schema, pads: bool = False) -> None:
    for field in schema:
        check_tensor_column(field, pads)


def variable_columns(schema: pa.Schema) -> list[str]:
    """Columns whose rows differ in size (strings, lists): gathered by `gather_variable`, not framed
    ahead."""
    return [field.name for field in schema if _is_variable(field.type)]


def _is_variable(kind: pa.DataType) -> bool:
    return bool(pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_list(kind)
                or pa.types.is_large_list(kind))


def gather_variable(pieces: Sequence[Piece], count: int, names: Sequence[str],
                    pad_value: float) -> dict[str, np.ndarray | WireTensor]:
    """The variable-size columns of the batch: strings packed, lists padded to the longest (with
    `<column>_lengths`)."""
    table = rows_in_batch_order(pieces, names)
    out: dict[str, np.ndarray | WireTensor] = {}
    for name in names:
        column = table.column(name).combine_chunks()
        if column.null_count:
            raise CorruptSample(f"column {name!r} has {column.null_count} null value(s) in this batch")
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            out[name] = pack_strings(column.to_pylist())
            continue
        lengths = column.value_lengths().to_numpy(zero_copy_only=False).astype(np.int64)
        values = _zero_copy_view(column.flatten())  # [total] or [total, k] (a list of fixed-size lists)
        padded = np.full((count, int(lengths.max()) if count else 0, *values.shape[1:]), pad_value,
                         dtype=values.dtype)
        rows = np.repeat(np.arange(count), lengths)
        places = np.arange(len(values)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        padded[rows, places] = values
        out[name], out[f"{name}_lengths"] = padded, lengths
    return out


def column_specs(pieces: Sequence[Piece], count: int) -> list[TensorSpec]:
    """The arrays `gather_arrays` makes of these pieces, before making them."""
    if not pieces:
        raise ValueError("a batch needs at least one row")
    views = _column_views(pieces[0].table)
    return [TensorSpec(name, source.dtype, (count, *source.shape[1:])) for name, (source, _) in views.items()]


def gather_arrays(pieces: Sequence[Piece], count: int,
                  out: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """The batch of `count` rows that `pieces` describe, one array per column, in column order:
    written into `out` (arrays shaped as `column_specs` says) when given, else new arrays."""
    specs = column_specs(pieces, count)
    arrays = dict(out) if out is not None else {s.name: np.empty(s.shape, dtype=s.dtype) for s in specs}
    columns = [(spec.name, arrays[spec.name]) for spec in specs]
    for piece in pieces:  # a piece's views looked up once for all its columns
        views = _column_views(piece.table)
        one_row = len(piece.at) == 1  # most pieces of a shuffled batch
        if one_row:
            position, row = int(piece.at[0]), int(piece.rows[0])
        for name, batch in columns:
            source, nulls = views[name]
            if nulls is not None and nulls[piece.rows].any():
                raise CorruptSample(
                    f"column {name!r} has {int(nulls[piece.rows].sum())} null value(s) in this batch")
            if one_row:
                batch[position] = source[row]
            else:
                _gather_into(batch, source, piece.rows, piece.at)
    return {spec.name: arrays[spec.name] for spec in specs}


# id(row group table) -> (a weak reference to it, its columns' views). A shuffled batch takes a row
# or two from each of dozens of row groups, which stay cached for the epoch: their views are made
# once per table, not once per batch. An entry goes when its table is freed.
_VIEWS: dict[int, tuple[weakref.ref[pa.Table], dict[str, tuple[np.ndarray, np.ndarray | None]]]] = {}
_VIEWS_LOCK = threading.Lock()


def _column_views(table: pa.Table) -> dict[str, tuple[np.ndarray, np.ndarray | None]]:
    """Each column of `table` as (zero-copy [n] or [n, k] view, rows holding a null or None)."""
    key = id(table)
    with _VIEWS_LOCK:
        entry = _VIEWS.get(key)
        if entry is not None and entry[0]() is table:
            return entry[1]
    views = {}
    for name in table.column_names:
        column = table.column(name)
        if _is_variable(column.type):
            continue  # gather_variable's
        array = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
        views[name] = (_zero_copy_view(array), _null_rows(array))
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


def _zero_copy_view(array: pa.Array) -> np.ndarray:
    """The whole column as [n] or [n, k], without a copy where Arrow's layout allows it."""
    if pa.types.is_fixed_size_list(array.type):
        values = _list_values(array).to_numpy(zero_copy_only=False)
        return values.reshape(len(array), array.type.list_size)
    return np.asarray(array.to_numpy(zero_copy_only=False))


def _null_rows(array: pa.Array) -> np.ndarray | None:
    """Which rows hold a null, as the row or inside its list; None when no row does."""
    rows = array.is_null().to_numpy(zero_copy_only=False) if array.null_count else None
    if pa.types.is_fixed_size_list(array.type):
        values = _list_values(array)
        if values.null_count:
            inside = values.is_null().to_numpy(zero_copy_only=False).reshape(len(array), -1).any(axis=1)
            rows = inside if rows is None else rows | inside
    return rows


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


__all__ = ["check_schema", "column_specs", "gather_arrays", "gather_variable", "variable_columns"]
