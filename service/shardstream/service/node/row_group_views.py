"""What the native batch path needs of a row group, worked out once per row group, not per batch.

A shuffled batch of 64 samples takes rows from about 35 row groups, and each row group serves many
batches. Taking a number column out of Arrow (``ChunkedArray.to_numpy``) costs tens of
microseconds, as does finding the JPEGs' offsets: done per batch and piece, that was about 25 us a
sample, a tenth of the decode. A `NativeView` holds them as numpy arrays over the row group's rows,
so a batch takes its rows by fancy indexing; it lives as long as its table (a weak reference: a
row group evicted from the node's copy takes its view with it).
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from shardstream.service.dataset import UNREADABLE_COLUMN


@dataclass(frozen=True)
class NativeView:
    """A row group as the native batch path reads it: each row's JPEG (address and size in the
    table's buffers) and its plain number columns, as arrays in the loop's dtypes."""

    schema: pa.Schema
    names: list[str]  # the tensors, in the row's order (the loop's)
    pointers: np.ndarray  # uint64: where each row's image bytes start
    sizes: np.ndarray  # uint64: how many there are
    numbers: dict[str, np.ndarray]  # the other columns
    _values: pa.Array  # the image column, whose buffers `pointers` point into


def number_dtype(kind: pa.DataType) -> np.dtype | None:
    """The dtype a column's values have in the usual loop (``np.asarray`` of the Python value
    ``as_py`` gives), for the plain number columns this path gathers; None for any other column."""
    if pa.types.is_boolean(kind):
        return np.dtype(bool)
    if pa.types.is_integer(kind) and kind != pa.uint64():  # a uint64 past int64 is no int64
        return np.dtype(np.int64)
    if pa.types.is_floating(kind):
        return np.dtype(np.float64)
    return None


def plain(schema: pa.Schema, names: list[str], image: str) -> bool:
    """Whether `names` hold the image as a binary column and plain number columns beside it."""
    if image not in names:
        return False
    kind = schema.field(image).type
    return (pa.types.is_binary(kind) or pa.types.is_large_binary(kind)) and all(
        number_dtype(schema.field(name).type) is not None for name in names if name != image)


class NativeViews:
    """Views by table, each made on first use and dropped with its table."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._views: dict[tuple[int, str], tuple[weakref.ref[pa.Table], NativeView | None]] = {}

    def __len__(self) -> int:
        return len(self._views)

    def get(self, table: pa.Table, image: str) -> NativeView | None:
        """The table's view, with `image` the JPEG column; None where this path does not take the
        table: another column than plain numbers beside a binary image, or a null value (or a row
        its format could not read: the loop's Python values would then differ)."""
        key = (id(table), image)
        with self._lock:
            found = self._views.get(key)
        if found is not None and found[0]() is table:
            return found[1]
        view = _view(table, image)
        forget = lambda _: self._forget(key)  # noqa: E731 (the table is gone: its id may be reused)
        with self._lock:
            self._views[key] = (weakref.ref(table, forget), view)
        return view

    def _forget(self, key: tuple[int, str]) -> None:
        with self._lock:
            found = self._views.get(key)
            if found is not None and found[0]() is None:
                del self._views[key]


def _view(table: pa.Table, image: str) -> NativeView | None:
    schema = table.schema
    names = [name for name in schema.names if name != UNREADABLE_COLUMN]
    if not plain(schema, names, image):
        return None
    for name in schema.names:
        if table.column(name).null_count != (len(table) if name == UNREADABLE_COLUMN else 0):
            return None
    column = table.column(image)
    values = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    _, offsets_buffer, data_buffer = values.buffers()
    offset_type = np.int64 if pa.types.is_large_binary(values.type) else np.int32
    offsets = np.frombuffer(offsets_buffer, dtype=offset_type)[values.offset : values.offset + len(values) + 1]
    address = data_buffer.address if data_buffer is not None else 0
    numbers = {name: np.ascontiguousarray(table.column(name).to_numpy().astype(number_dtype(schema.field(name).type)))
               for name in names if name != image}
    return NativeView(schema=schema, names=names, pointers=offsets[:-1].astype(np.uint64) + np.uint64(address),
                      sizes=np.diff(offsets).astype(np.uint64), numbers=numbers, _values=values)


VIEWS = NativeViews()  # one per process: a row group's view serves every job reading it

__all__ = ["VIEWS", "NativeView", "NativeViews", "number_dtype", "plain"]
