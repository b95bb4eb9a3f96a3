"""Per-sample values a plan needs, read from a column when the job opens: weights and lengths.

With ``weights="<column>"`` each epoch draws the global sequence
``torch.multinomial(weights, N, replacement=True, generator=seeded(seed + epoch))``,
what ``WeightedRandomSampler`` does, and ranks split it as DistributedSampler
splits its permutation (plan.py). With ``bucket_by="<column>"`` each rank's
samples are grouped into batches of similar length (plan.py): the length of a
list column's value, or a numeric column's value. A column is read once, unit
by unit, through the dataset's format (for Parquet, that one column of each
row group), and checked, naming the first bad sample.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute

from shardstream.proto.errors import InvalidJobSpec
from shardstream.service.dataset import UNREADABLE_COLUMN, DatasetIndex, in_parallel
from shardstream.service.node.read_counters import SharedReadCounters
from shardstream.service.node.storage_reader import StorageReader

MAX_CATEGORIES = 2**24  # torch.multinomial draws from at most this many


def read_column(index: DatasetIndex, column: str, what: str) -> pa.ChunkedArray:
    """Every sample's value of `column`, in global order; `what` names its use in errors."""
    if column not in index.schema.names:
        raise InvalidJobSpec(f"{what} column {column!r} is not in the dataset; it has {index.schema.names}")
    storage = StorageReader(SharedReadCounters())
    units = [(shard, unit) for shard in index.shards for unit in range(len(shard.row_group_rows))]
    tables = in_parallel(lambda su: storage.row_group(su[0], su[1], [column]), units, what)
    _check_readable(index, tables)
    values = pa.chunked_array([c for table in tables for c in table.column(column).chunks],
                              type=index.schema.field(column).type)
    if values.null_count:
        first = int(np.flatnonzero(values.is_null().to_numpy(zero_copy_only=False))[0])
        raise InvalidJobSpec(f"sample {first} ({index.describe(first)}) has no {what} ({column!r} is null)")
    return values


def _check_readable(index: DatasetIndex, tables: list[pa.Table]) -> None:
    """InvalidJobSpec naming the first sample its format could not read (a JSON line that does not
    parse): its value is no value."""
    start = 0
    for table in tables:
        if UNREADABLE_COLUMN in table.column_names:
            marks = table.column(UNREADABLE_COLUMN)
            if marks.null_count != len(marks):
                row = int(np.flatnonzero(marks.is_valid().to_numpy(zero_copy_only=False))[0])
                raise InvalidJobSpec(f"sample {start + row} ({index.describe(start + row)}) cannot be read: "
                                     f"{marks[row].as_py()}")
        start += len(table)


def read_weights(index: DatasetIndex, column: str) -> np.ndarray:
    """Every sample's weight (float64, in global order); InvalidJobSpec naming the sample for a bad one."""
    if column in index.schema.names:
        kind = index.schema.field(column).type
        if not (pa.types.is_integer(kind) or pa.types.is_floating(kind)):
            raise InvalidJobSpec(f"weights column {column!r} has type {kind}: weights are numbers")
    if index.num_rows > MAX_CATEGORIES:
        raise InvalidJobSpec(f"weighted sampling draws from at most {MAX_CATEGORIES} samples (torch.multinomial), "
                             f"the dataset has {index.num_rows}")
    weights = read_column(index, column, "weights").to_numpy().astype(np.float64)
    bad = np.flatnonzero(~np.isfinite(weights) | (weights < 0))
    if len(bad):
        i = int(bad[0])
        raise InvalidJobSpec(f"weight {weights[i]} of sample {i} ({index.describe(i)}) is "
                             f"{'negative' if weights[i] < 0 else 'not finite'}: weights are finite and >= 0 "
                             f"({len(bad)} such sample(s))")
    if not weights.sum() > 0:
        raise InvalidJobSpec(f"every weight in column {column!r} is 0: nothing to draw")
    return weights


def read_lengths(index: DatasetIndex, column: str) -> np.ndarray:
    """Every sample's length (int64): a list column's value lengths, or a numeric column's values."""
    kind = index.schema.field(column).type if column in index.schema.names else None
    if kind is not None and (pa.types.is_list(kind) or pa.types.is_large_list(kind)):
        values = read_column(index, column, "length")
        return np.concatenate([c.value_lengths().to_numpy(zero_copy_only=False) for c in values.chunks]).astype(
            np.int64) if values.num_chunks else np.zeros(0, dtype=np.int64)
    if kind is not None and not (pa.types.is_integer(kind) or pa.types.is_floating(kind)
                                 or pa.types.is_string(kind) or pa.types.is_binary(kind)):
        raise InvalidJobSpec(f"bucket_by column {column!r} has type {kind}: it holds lists, strings or numbers")
    values = read_column(index, column, "length")
    if pa.types.is_string(values.type) or pa.types.is_binary(values.type):
        return np.concatenate([pa.compute.binary_length(c).to_numpy() for c in values.chunks]).astype(np.int64)
    return values.to_numpy().astype(np.int64)


__all__ = ["MAX_CATEGORIES", "read_column", "read_lengths", "read_weights"]
