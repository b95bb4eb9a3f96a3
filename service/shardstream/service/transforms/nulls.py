"""Nulls at open: a job whose columns hold nulls its tensors cannot is refused before any batch.

Without a transform a batch has no place for an integer's, a bool's, a
timestamp's, a string's or a list's null (a float's is NaN, as pyarrow's
``to_numpy`` gives it). Parquet footers count each column chunk's nulls
(statistics): the index keeps the first row group of each file that holds one
(formats/parquet.py), so the refusal costs no data read unless it is made:
then that one column chunk is read to name the exact row. Under
``nulls="mask"`` nothing is refused here; the batch carries ``<column>_mask``.

Variable-length lists are not checked here: Parquet counts an empty list as
a null of its values, so the count cannot tell one from the other. Where a
footer has no null count for a column (statistics turned off when the
file was written) nothing can be said at open: the decoder refuses the batch
that holds such a null, naming its file, row and column (CorruptSample), and
so does a list column's null. Other
formats (WebDataset, image folders, manifests) have no such counts either, and
are checked the same way, batch by batch.
"""

from __future__ import annotations

import pyarrow as pa

from shardstream.proto.errors import InvalidJobSpec
from shardstream.service.dataset import DatasetIndex
from shardstream.service.transforms.values import LIST, mask_name, tensor_type

MASK = "mask"


def check_nulls(index: DatasetIndex, schema: pa.Schema, nulls: str) -> None:
    """Refuse (InvalidJobSpec naming file, column and row) a column of `schema` whose footers
    count a null its tensor cannot hold; under ``nulls="mask"``, refuse a mask's name that is
    a column already."""
    if nulls == MASK:
        taken = [mask_name(name) for name in schema.names if mask_name(name) in schema.names]
        if taken:
            raise InvalidJobSpec(f"nulls='mask' adds {taken}, which the dataset has as column(s) already: "
                                 "leave one out with columns=[...]")
        return
    for field in schema:
        kind = tensor_type(field, pads=True)
        if kind.floats or kind.kind == LIST:
            continue  # NaN; a list's count includes its empty lists: its nulls are the decoder's to find
        for shard in index.shards:
            first = getattr(shard.layout, "first_null_row_group", None)
            row_group = first(field.name) if first is not None else None
            if row_group is not None:
                raise InvalidJobSpec(
                    f"column {field.name!r} ({field.type}) holds a null at {_where(shard, row_group, field.name)}: "
                    f"its tensor ({kind.dtype or 'strings'}) has no place for it. nulls='mask' delivers it (as "
                    f"{_filler(kind.dtype)}) with a bool {mask_name(field.name)!r} tensor, False there; or leave "
                    "the column out with columns=[...]")


def _where(shard: object, row_group: int, column: str) -> str:
    """"row R of FILE": the first null of that row group, read from its column chunk."""
    from shardstream.service.formats.parquet import first_null_row

    return first_null_row(shard, row_group, column)  # type: ignore[arg-type]


def _filler(dtype: object) -> str:
    kind = getattr(dtype, "kind", "")
    return {"b": "False", "i": "0", "u": "0", "M": "0", "m": "0"}.get(kind, "'' or an empty list")


__all__ = ["MASK", "check_nulls"]
