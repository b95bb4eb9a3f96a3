"""A batch's rows as pieces of cached row groups: which rows of each, and where they go in the batch.

The node's reader (node/reader.py) cuts a batch into pieces; the column gather
(columns.py) and the batch builders read them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa


@dataclass(frozen=True)
class Piece:
    """Rows of one cached row group that a batch needs, and where they go in the batch."""

    table: pa.Table  # the whole row group
    rows: np.ndarray  # rows of `table`, in batch order
    at: np.ndarray  # their positions in the batch, ascending


def rows_in_batch_order(pieces: Sequence[Piece], columns: Sequence[str] | None = None) -> pa.Table:
    """The pieces' rows (of `columns`, None: all) as one table, in batch order."""
    taken = [(piece.table if columns is None else piece.table.select(list(columns))).take(pa.array(piece.rows))
             for piece in pieces]
    combined = pa.concat_tables(taken) if len(taken) > 1 else taken[0]
    order = np.concatenate([piece.at for piece in pieces])
    inverse = np.empty_like(order)
    inverse[order] = np.arange(len(order))
    return combined.take(pa.array(inverse))


__all__ = ["Piece", "rows_in_batch_order"]
