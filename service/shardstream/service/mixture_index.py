"""A mixture's dataset: its sources' indexes one after another, as one index.

Source s holds the global indices source_starts[s] .. source_starts[s + 1] - 1, so everything
downstream of the plan (decoders, caches, the data plane) serves a mixture as it serves one
dataset; only the epoch's order (mixture_plan.py) knows there are sources. Each source is read
by its own format; their outputs must agree (the same columns, of the same types), and a file
belongs to one source (a source is weighed by its weight, not by listing its files twice).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa

from shardstream.proto.errors import InvalidJobSpec, ShardstreamError
from shardstream.proto.mixture import MixtureSpec
from shardstream.service.dataset import DatasetIndex, allow_any
from shardstream.service.formats import index_dataset, job_format_args


def index_mixture(mixture: MixtureSpec, columns: tuple[str, ...] = (), allow: Callable[[str], None] = allow_any,
                  transform_args: dict[str, Any] | None = None, max_line_bytes: int | None = None) -> DatasetIndex:
    indexes = []
    for name, dataset, format, format_args in zip(mixture.names, mixture.datasets, mixture.formats,
                                                  mixture.format_args, strict=True):
        args = job_format_args(format, format_args, dict(transform_args or {}),
                               *(() if max_line_bytes is None else (max_line_bytes,)))
        try:
            indexes.append(index_dataset(dataset, columns, allow=allow, format=format, format_args=args))
        except ShardstreamError as exc:
            raise type(exc)(f"mixture source {name!r}: {exc}") from None
    first = indexes[0]
    for name, index in zip(mixture.names[1:], indexes[1:], strict=True):
        _check_same_columns(mixture.names[0], first.schema, name, index.schema)
    owner: dict[str, str] = {}
    for name, index in zip(mixture.names, indexes, strict=True):
        for shard in index.shards:
            other = owner.setdefault(shard.url, name)
            if other != name:
                raise InvalidJobSpec(f"file {shard.url!r} is in mixture sources {other!r} and {name!r}: a file "
                                     "belongs to one source (raise a source's weight to draw it more)")
    formats = sorted({index.format for index in indexes})
    return DatasetIndex(shards=tuple(shard for index in indexes for shard in index.shards), schema=first.schema,
                        format="mixture of " + ", ".join(formats),
                        sources=tuple((name, index.num_rows) for name, index in zip(mixture.names, indexes,
                                                                                    strict=True)))


def _check_same_columns(first_name: str, first: pa.Schema, name: str, schema: pa.Schema) -> None:
    """The sources' samples become one batch: their columns and types must be the same."""
    a, b = dict(zip(first.names, first.types, strict=True)), dict(zip(schema.names, schema.types, strict=True))
    if set(a) != set(b):
        raise InvalidJobSpec(
            f"mixture sources {first_name!r} and {name!r} have other columns: only in {first_name!r}: "
            f"{sorted(set(a) - set(b))}, only in {name!r}: {sorted(set(b) - set(a))} (choose the common ones "
            "with columns=[...])")
    differ = {c: f"{a[c]} in {first_name!r}, {b[c]} in {name!r}" for c in a if a[c] != b[c]}
    if differ:
        raise InvalidJobSpec(f"mixture sources {first_name!r} and {name!r} give columns of other types: {differ}")


__all__ = ["index_mixture"]
