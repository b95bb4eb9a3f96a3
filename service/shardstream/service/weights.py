"""Weighted sampling's weights: one number per sample, read from a column when the job opens.

With ``weights="<column>"`` each epoch draws the global sequence
``torch.multinomial(weights, N, replacement=True, generator=seeded(seed + epoch))``,
what ``WeightedRandomSampler`` does, and ranks split it as DistributedSampler
splits its permutation (plan.py). The column is read once, unit by unit,
through the dataset's format (for Parquet, that one column of each row group),
and checked: numbers, none missing, none negative or infinite, some positive.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from shardstream.proto.errors import InvalidJobSpec
from shardstream.service.dataset import DatasetIndex, in_parallel
from shardstream.service.node.read_counters import SharedReadCounters
from shardstream.service.node.storage_reader import StorageReader

MAX_CATEGORIES = 2**24  # torch.multinomial draws from at most this many


def read_weights(index: DatasetIndex, column: str) -> np.ndarray:
    """Every sample's weight (float64, in global order); InvalidJobSpec naming the sample for a bad one."""
    if column not in index.schema.names:
        raise InvalidJobSpec(f"weights column {column!r} is not in the dataset; it has {index.schema.names}")
    kind = index.schema.field(column).type
    if not (pa.types.is_integer(kind) or pa.types.is_floating(kind)):
        raise InvalidJobSpec(f"weights column {column!r} has type {kind}: weights are numbers")
    if index.num_rows > MAX_CATEGORIES:
        raise InvalidJobSpec(f"weighted sampling draws from at most {MAX_CATEGORIES} samples (torch.multinomial), "
                             f"the dataset has {index.num_rows}")
    storage = StorageReader(SharedReadCounters())
    units = [(shard, unit) for shard in index.shards for unit in range(len(shard.row_group_rows))]
    tables = in_parallel(lambda su: storage.row_group(su[0], su[1], [column]), units, "weights")
    values = pa.chunked_array([c for table in tables for c in table.column(column).chunks], type=kind)
    if values.null_count:
        first = int(np.flatnonzero(values.is_null().to_numpy(zero_copy_only=False))[0])
        raise InvalidJobSpec(f"sample {first} ({index.describe(first)}) has no weight ({column!r} is null)")
    weights = values.to_numpy().astype(np.float64)
    bad = np.flatnonzero(~np.isfinite(weights) | (weights < 0))
    if len(bad):
        i = int(bad[0])
        raise InvalidJobSpec(f"weight {weights[i]} of sample {i} ({index.describe(i)}) is "
                             f"{'negative' if weights[i] < 0 else 'not finite'}: weights are finite and >= 0 "
                             f"({len(bad)} such sample(s))")
    if not weights.sum() > 0:
        raise InvalidJobSpec(f"every weight in column {column!r} is 0: nothing to draw")
    return weights


__all__ = ["MAX_CATEGORIES", "read_weights"]
