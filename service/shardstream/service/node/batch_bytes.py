"""One batch's bytes, bounded while a decode actor builds it.

A job's `batch_size` is bounded (max_batch_size) and so is a sample's size, but not their
product: a million large samples would be decoded into one batch before anything noticed. No
batch larger than `max_message_bytes` can be sent, so a decoder stops building one as soon as
it passes that: before gathering plain columns (their size is known from the row groups read),
and sample by sample through a transform. The rank gets BatchTooLarge naming the bound.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from shardstream.proto.errors import BatchTooLarge


def sample_nbytes(sample: Mapping[str, Any]) -> int:
    """What one transformed sample adds to its batch (arrays, tensors, bytes and strings)."""
    total = 0
    for value in sample.values():
        nbytes = getattr(value, "nbytes", None)
        if nbytes is not None:
            total += int(nbytes)
        elif hasattr(value, "element_size") and hasattr(value, "numel"):  # a torch tensor
            total += int(value.element_size() * value.numel())
        elif isinstance(value, (bytes, str)):
            total += len(value)
        else:
            total += 8
    return total


def gathered_nbytes(pieces: Sequence[Any], limit: int | None = None) -> int:
    """About what gathering these pieces (row group tables and the rows taken of each) makes.

    A table's `nbytes` walks its buffers for the ranges its arrays view (4 us for a row group),
    and a shuffled batch has about a piece per row: with `limit`, the size of the tables' buffers
    (0.1 us; larger for a table viewing part of them) is summed first, and `nbytes` only when
    that passes the limit."""
    if limit is not None:
        whole = _rows_share(pieces, lambda table: table.get_total_buffer_size())
        if whole <= limit:
            return whole
    return _rows_share(pieces, lambda table: table.nbytes)


def _rows_share(pieces: Sequence[Any], size: Callable[[Any], int]) -> int:
    """The rows each piece takes of its table's `size`, summed."""
    return sum(int(size(p.table) * len(p.rows) / max(p.table.num_rows, 1)) for p in pieces)


def check_batch_bytes(nbytes: int, limit: int, count: int, of: int, where: Callable[[], str]) -> None:
    """BatchTooLarge once a batch built so far (`count` of its `of` samples) passes `limit`;
    `where` names the batch, asked only then (it runs for every sample)."""
    if nbytes > limit:
        done = "its samples" if count >= of else f"its first {count} of {of} samples"
        raise BatchTooLarge(f"the batch of {where()} passes {limit:,} bytes with {done} ({nbytes:,} bytes): no "
                            "batch may be larger than the service's max_message_bytes; lower batch_size "
                            "(or the transform's output size)")


__all__ = ["check_batch_bytes", "gathered_nbytes", "sample_nbytes"]
