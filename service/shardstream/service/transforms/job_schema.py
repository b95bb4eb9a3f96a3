"""A job's columns and transform checked against its dataset's schema when it opens: what could
never collate is refused then, by the control plane, instead of mid-epoch by a decode actor."""

from __future__ import annotations

import pyarrow as pa

from shardstream.proto.errors import InvalidJobSpec
from shardstream.service.dataset import DatasetIndex
from shardstream.service.transforms.base import SampleTransform
from shardstream.service.transforms.collate import PAD
from shardstream.service.transforms.columns import check_schema
from shardstream.service.transforms.nulls import MASK, check_nulls


def check_job_schema(schema: pa.Schema, transform: SampleTransform | None, collate: str = "",
                     index: DatasetIndex | None = None, nulls: str = "") -> None:
    """Refuse at open time what could never collate, instead of mid-epoch: a column no tensor
    holds, (given the `index`) nulls its tensor has no place for (transforms/nulls.py), and a
    transform's values of varying length without collate='pad'."""
    plain = transform is None and collate in ("", PAD)  # a user collate takes whatever the rows hold
    if nulls == MASK and not plain:
        raise InvalidJobSpec("nulls='mask' is for columns delivered without a transform or a user collate, "
                             "which are given the rows' nulls (None) themselves")
    if transform is None:
        if plain:
            check_schema(schema, pads=collate == PAD)
            if index is not None:
                check_nulls(index, schema, nulls)
        return
    check = getattr(transform, "check_schema", None)
    if check is not None:
        check(schema)
    check_collate = getattr(transform, "check_collate", None)  # a transform whose values only pad
    if check_collate is not None:
        check_collate(collate)


__all__ = ["check_job_schema"]
