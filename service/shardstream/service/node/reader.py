"""Reading rows by global index, one row group at a time, from the node's local copy or storage.

Shuffled batches touch rows all over the dataset. With the local copy on
(local_copy.py), every row group the node has read stays on its disk,
memory-mapped, so storage is read about once per node whatever the order.
With it off, a decode actor keeps the row groups it used recently in an
in-memory LRU bounded in bytes, and every other row group is read from
storage again. The row groups a batch lacks are loaded in parallel.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from concurrent.futures import Executor
from typing import Any

import numpy as np
import pyarrow as pa

from shardstream.service.dataset import DatasetIndex, Shard
from shardstream.service.node.local_copy import LocalCopy, RowGroupKey
from shardstream.service.node.storage_reader import StorageReader
from shardstream.service.transforms.pieces import Piece, rows_in_batch_order


class RowGroupCache:
    """LRU of row groups keyed by (shard identity, row group, columns), bounded in bytes."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._tables: OrderedDict[Hashable, pa.Table] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()  # a batch's row groups load on several threads

    def get(self, key: Hashable) -> pa.Table | None:
        with self._lock:
            table = self._tables.get(key)
            if table is not None:
                self._tables.move_to_end(key)
            return table

    def put(self, key: Hashable, table: pa.Table) -> None:
        with self._lock:
            old = self._tables.pop(key, None)
            if old is not None:
                self._bytes -= old.nbytes
            self._tables[key] = table
            self._bytes += table.nbytes
            while self._bytes > self.max_bytes and len(self._tables) > 1:
                _, old = self._tables.popitem(last=False)
                self._bytes -= old.nbytes


class RowGroupSource:
    """A row group by (shard, row group, columns): from the node's local copy (filled from storage
    on a miss) when it is on, else from the in-memory LRU, else from storage."""

    def __init__(self, storage: StorageReader, memory: RowGroupCache | None = None,
                 local: LocalCopy | None = None) -> None:
        self.storage = storage
        self.memory = memory or RowGroupCache(0)
        self.local = local
        self.counters = storage.counters

    def cached(self, wanted: list[tuple[Shard, int]], columns: tuple[str, ...] | None,
               ) -> list[pa.Table | None]:
        """Each (shard, row group) if this process holds it already (no I/O), else None."""
        if self.local is not None:
            local = self.local
            tables = [local.cached(RowGroupKey(shard, rg, columns)) for shard, rg in wanted]
        else:
            tables = [self.memory.get((shard.identity, rg, columns)) for shard, rg in wanted]
        hits = sum(table is not None for table in tables)
        if hits:
            self.counters.count(memory_hits=hits)
        return tables

    def get(self, shard: Shard, row_group: int, columns: tuple[str, ...] | None) -> pa.Table:
        """The row group, loaded if need be (after `cached` said None: counted as a memory miss)."""
        cols = list(columns) if columns is not None else None
        if self.local is not None:
            return self.local.get(RowGroupKey(shard, row_group, columns),
                                  lambda: self.storage.row_group(shard, row_group, cols))
        self.counters.count(memory_misses=1)
        table = self.storage.row_group(shard, row_group, cols)
        self.memory.put((shard.identity, row_group, columns), table)
        return table


def python_rows(piece: Piece, chosen: list[int] | None = None, without: str = "") -> list[dict[str, Any]]:
    """The piece's rows (those at `chosen`, places in the piece, when given) as ``to_pylist`` gives
    them, in the table's column order; column `without` holds None, its values never copied into
    Python (a caller that puts another value there)."""
    columns = [(name, column.chunk(0) if column.num_chunks == 1 else column.combine_chunks())
               for name, column in zip(piece.table.column_names, piece.table.columns, strict=True)]
    rows = piece.rows.tolist()
    return [{name: None if name == without else values[rows[k]].as_py() for name, values in columns}
            for k in (range(len(rows)) if chosen is None else chosen)]


class ShardReader:
    """Rows of one dataset by global index, in the order asked for."""

    def __init__(self, index: DatasetIndex, columns: list[str] | None, source: RowGroupSource,
                 loaders: Executor | None = None) -> None:
        self.index = index
        self.columns = tuple(columns) if columns is not None else None
        self.source = source
        self.loaders = loaders  # loads a batch's missing row groups in parallel; None: one by one
        # Every row group of the dataset, in global order: its first global index, its file and its
        # place in that file. A batch's rows are grouped by one searchsorted and one sort.
        per_file = [len(shard.row_group_rows) for shard in index.shards]
        self._rg_starts = np.cumsum([0, *index.row_group_rows], dtype=np.int64)[:-1]
        self._rg_file = np.repeat(np.arange(len(per_file)), per_file)
        self._rg_in_file = np.concatenate([np.arange(n) for n in per_file])

    def pieces(self, indices: np.ndarray) -> list[Piece]:
        """The batch `indices` as row-group pieces (in dataset order), without copying any row."""
        indices = np.asarray(indices, dtype=np.int64)
        if not len(indices):
            return []
        rgs = np.searchsorted(self._rg_starts, indices, side="right") - 1
        order = np.argsort(rgs, kind="stable")  # positions grouped by row group, ascending within
        bounds = (np.flatnonzero(np.diff(rgs[order])) + 1).tolist()
        groups = [order[a:b] for a, b in zip([0, *bounds], [*bounds, len(order)], strict=True)]
        rows = indices - self._rg_starts[rgs]
        wanted = [int(rgs[at[0]]) for at in groups]
        tables = self._row_groups([(int(self._rg_file[g]), int(self._rg_in_file[g])) for g in wanted])
        return [Piece(table, rows[at], at) for table, at in zip(tables, groups, strict=True)]

    def read(self, indices: np.ndarray) -> pa.Table:
        """The rows at `indices`, in that order, as one table."""
        return rows_in_batch_order(self.pieces(indices))

    def rows(self, indices: np.ndarray) -> list[dict[str, Any]]:
        """``read(indices).to_pylist()``, without gathering the rows into a table first: each
        value is taken from its row group as Python (``as_py``, what ``to_pylist`` gives)."""
        out: list[dict[str, Any]] = [{}] * len(indices)
        for piece in self.pieces(indices):
            for at, row in zip(piece.at.tolist(), python_rows(piece), strict=True):
                out[at] = row
        return out

    def _row_groups(self, wanted: list[tuple[int, int]]) -> list[pa.Table]:
        """The row groups (file, row group): those held already, then the rest loaded in parallel."""
        shards = self.index.shards
        tables = self.source.cached([(shards[f], rg) for f, rg in wanted], self.columns)
        missing = [i for i, table in enumerate(tables) if table is None]
        load = lambda i: self.source.get(shards[wanted[i][0]], wanted[i][1], self.columns)  # noqa: E731
        if len(missing) > 1 and self.loaders is not None:
            loaded = list(self.loaders.map(load, missing))
        else:
            loaded = [load(i) for i in missing]
        for i, table in zip(missing, loaded, strict=True):
            tables[i] = table
        return tables  # type: ignore[return-value]


__all__ = ["RowGroupCache", "RowGroupSource", "ShardReader", "python_rows"]
