"""Reading rows by global index, one row group at a time, with an LRU cache.

Shuffled batches touch rows all over the dataset; a decode actor keeps the
row groups it read recently (bounded in bytes) so neighbouring batches of the
same epoch reuse them instead of reading the shard again.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from shardstream.proto.errors import DatasetNotFound, UnreadableShard
from shardstream.service.dataset import DatasetIndex


class RowGroupCache:
    """LRU of decoded row groups keyed by (shard, row group, columns), bounded in bytes."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._tables: OrderedDict[tuple[str, int, tuple[str, ...] | None], pa.Table] = OrderedDict()
        self._bytes = 0

    def get(self, key: tuple[str, int, tuple[str, ...] | None]) -> pa.Table | None:
        table = self._tables.get(key)
        if table is not None:
            self._tables.move_to_end(key)
        return table

    def put(self, key: tuple[str, int, tuple[str, ...] | None], table: pa.Table) -> None:
        old = self._tables.pop(key, None)
        if old is not None:
            self._bytes -= old.nbytes
        self._tables[key] = table
        self._bytes += table.nbytes
        while self._bytes > self.max_bytes and len(self._tables) > 1:
            _, old = self._tables.popitem(last=False)
            self._bytes -= old.nbytes


@dataclass(frozen=True)
class Piece:
    """Rows of one cached row group that a batch needs, and where they go in the batch."""

    table: pa.Table  # the whole row group
    rows: np.ndarray  # rows of `table`, in batch order
    at: np.ndarray  # their positions in the batch, ascending


class ShardReader:
    """Rows of one dataset by global index, in the order asked for."""

    def __init__(self, index: DatasetIndex, columns: list[str] | None, cache: RowGroupCache) -> None:
        self.index = index
        self.columns = columns
        self.cache = cache
        self._file_starts = index.file_starts
        self._rg_starts = [
            np.concatenate([[0], np.cumsum(s.row_group_rows)]).astype(np.int64) for s in index.shards
        ]
        self._files: dict[str, pq.ParquetFile] = {}

    def pieces(self, indices: np.ndarray) -> list[Piece]:
        """The batch `indices` as row-group pieces, without copying any row."""
        indices = np.asarray(indices, dtype=np.int64)
        file_ids = np.searchsorted(self._file_starts, indices, side="right") - 1
        local = indices - self._file_starts[file_ids]
        out: list[Piece] = []
        for file_id in np.unique(file_ids):
            in_file = np.nonzero(file_ids == file_id)[0]
            starts = self._rg_starts[file_id]
            rgs = np.searchsorted(starts, local[in_file], side="right") - 1
            for rg in np.unique(rgs):
                at = in_file[rgs == rg]
                out.append(Piece(self._row_group(int(file_id), int(rg)), local[at] - starts[rg], at))
        return out

    def read(self, indices: np.ndarray) -> pa.Table:
        """The rows at `indices`, in that order, as one table."""
        pieces = self.pieces(indices)
        taken = [piece.table.take(pa.array(piece.rows)) for piece in pieces]
        combined = pa.concat_tables(taken) if len(taken) > 1 else taken[0]
        order = np.concatenate([piece.at for piece in pieces])
        inverse = np.empty_like(order)
        inverse[order] = np.arange(len(order))
        return combined.take(pa.array(inverse))

    def _row_group(self, file_id: int, rg: int) -> pa.Table:
        url = self.index.shards[file_id].url
        key = (url, rg, tuple(self.columns) if self.columns is not None else None)
        cached = self.cache.get(key)
        if cached is not None:
            return cached
        try:
            table = self._open(url).read_row_group(rg, columns=self.columns)
        except FileNotFoundError:
            raise DatasetNotFound(f"shard {url!r} disappeared while the job was running") from None
        except (pa.ArrowException, OSError) as exc:
            raise UnreadableShard(f"cannot read row group {rg} of {url!r}: {exc}") from None
        self.cache.put(key, table)
        return table

    def _open(self, url: str) -> pq.ParquetFile:
        pf = self._files.get(url)
        if pf is None:
            fs, path = fsspec.core.url_to_fs(url)
            pf = pq.ParquetFile(fs.open(path, "rb"))
            self._files[url] = pf
        return pf


__all__ = ["Piece", "RowGroupCache", "ShardReader"]
