"""Parquet: a shard is a file, a unit a row group. The index is built from footers alone.

The footers also say, per row group and column, how many nulls it holds (its
statistics): the index keeps, for each column, the first row group holding a
null (`ParquetLayout`), so a job
that cannot take a null is refused at open without reading any data
(transforms/nulls.py).
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from shardstream.proto.errors import DatasetNotFound, SchemaMismatch, UnreadableShard
from shardstream.service.dataset import (
    DatasetIndex,
    Shard,
    brief,
    check_columns,
    in_parallel,
    resolve_urls,
    stat_file,
)
from shardstream.service.formats.base import Allow, UnitStorage, take_args

log = logging.getLogger(__name__)

SUFFIXES = (".parquet", ".parq", ".pq")


@dataclass(frozen=True)
class ParquetLayout:
    """What a file's footer says of its nulls: (column, first row group whose statistics count a
    null) for the columns that hold one. A row group without a count says nothing: the decoder
    finds its nulls."""

    first_nulls: tuple[tuple[str, int], ...] = ()

    def first_null_row_group(self, column: str) -> int | None:
        return dict(self.first_nulls).get(column)


def null_layout(meta: pq.FileMetaData, schema: pa.Schema, columns: tuple[str, ...] = ()) -> ParquetLayout | None:
    """The footer's null counts per top-level column of `columns` (all when empty) whose nulls a
    batch may refuse (not floats': NaN; not variable lists': their counts include empty lists);
    a column's leaves (a fixed-size list's values) count for it. Each column's counts are read
    until its first null. None when the footer counts no null of such a column."""
    owners = [field.name for field in schema for _ in range(_leaves(field.type))]
    if len(owners) != meta.num_columns:  # a schema Arrow reads differently: say nothing, the decoder checks
        return None
    wanted = {field.name for field in schema if (not columns or field.name in columns) and _counted(field.type)}
    pending = [(leaf, owner) for leaf, owner in enumerate(owners) if owner in wanted]
    first: dict[str, int] = {}
    for rg in range(meta.num_row_groups):
        if not pending:
            break
        group = meta.row_group(rg)
        if not group.num_rows:
            continue  # an empty row group counts nothing, and holds no null
        for leaf, owner in pending:
            stats = group.column(leaf).statistics
            if stats is not None and stats.has_null_count and stats.null_count and owner not in first:
                first[owner] = rg
        pending = [(leaf, owner) for leaf, owner in pending if owner not in first]
    return ParquetLayout(tuple(sorted(first.items()))) if first else None


def _counted(kind: pa.DataType) -> bool:
    """Whether a footer's null count says something a batch needs of a column of this type."""
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    if pa.types.is_fixed_size_list(kind):
        kind = kind.value_type
    return not (pa.types.is_floating(kind) or pa.types.is_list(kind) or pa.types.is_large_list(kind))


def _leaves(kind: pa.DataType) -> int:
    """How many Parquet columns (leaves) an Arrow type is stored as."""
    if pa.types.is_struct(kind):
        return sum(_leaves(kind.field(i).type) for i in range(kind.num_fields))
    if pa.types.is_map(kind):
        return _leaves(kind.key_type) + _leaves(kind.item_type)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        return _leaves(kind.value_type)
    return 1


def read_shard(url: str, columns: tuple[str, ...] = ()) -> tuple[Shard, pa.Schema]:
    """A shard's footer: size, rows, row groups, schema, and the nulls of `columns` (all: empty)."""
    fs, path, size, version = stat_file(url, "shard")
    try:
        with fs.open(path, "rb") as f:
            meta = pq.ParquetFile(f).metadata
            schema = meta.schema.to_arrow_schema()
    except FileNotFoundError:
        raise DatasetNotFound(f"shard {url!r} does not exist") from None
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise UnreadableShard(f"shard {url!r} is not a readable Parquet file: {exc}") from None
    rows = tuple(meta.row_group(i).num_rows for i in range(meta.num_row_groups))
    return Shard(url=url, size=size, num_rows=meta.num_rows, row_group_rows=rows, version=version,
                 layout=null_layout(meta, schema, columns)), schema


def index_files(urls: list[str], columns: tuple[str, ...]) -> DatasetIndex:
    """Read every footer (in parallel) and check the schemas agree."""
    results = in_parallel(functools.partial(read_shard, columns=columns), urls, "shards")
    shards = tuple(shard for shard, _ in results)
    schemas = [check_columns(schema.remove_metadata(), columns, f"shard {url!r}")
               for (_, schema), url in zip(results, urls, strict=True)]
    first = schemas[0]
    for schema, url in zip(schemas[1:], urls[1:], strict=True):
        if not schema.equals(first):
            raise SchemaMismatch(f"shard {url!r} has schema [{brief(schema)}] but {urls[0]!r} has [{brief(first)}]")
    return DatasetIndex(shards=shards, schema=first)


class ParquetFormat:
    name = "parquet"

    def index(self, dataset: tuple[str, ...], args: dict[str, Any], columns: tuple[str, ...],
              allow: Allow) -> DatasetIndex:
        take_args(self.name, args, {})
        urls = resolve_urls(dataset, allow, SUFFIXES, "Parquet")
        log.info("indexing %d Parquet shard(s) of %s", len(urls), list(dataset))
        return index_files(urls, columns)

    def read_unit(self, shard: Shard, unit: int, columns: tuple[str, ...] | None,
                  storage: UnitStorage) -> pa.Table:
        metadata = storage.memo(("parquet footer", shard.url, shard.version),
                                lambda: _footer(shard, storage))
        with storage.open(shard.url, shard.version) as raw:
            return pq.ParquetFile(raw, metadata=metadata).read_row_group(
                unit, columns=list(columns) if columns is not None else None)


def first_null_row(shard: Shard, row_group: int, column: str) -> str:
    """Where the first null of `column` in row group `row_group` is, as "row R of URL": that one
    column chunk is read (only to name the row of a refusal); the row group when it cannot be."""
    start = sum(shard.row_group_rows[:row_group])
    try:
        fs, path = fsspec.core.url_to_fs(shard.url)
        with fs.open(path, "rb") as f:
            values = pq.ParquetFile(f).read_row_group(row_group, columns=[column]).column(0)
        nulls = _rows_with_nulls(values.combine_chunks())
        return f"row {start + int(nulls.index(True))} of {shard.url}"
    except (OSError, ValueError, pa.ArrowException):
        rows = shard.row_group_rows[row_group]
        return f"rows {start}..{start + rows - 1} (row group {row_group}) of {shard.url}"


def _rows_with_nulls(array: pa.Array) -> list[bool]:
    """Whether each row is null or holds a null in its list."""
    rows = array.is_null().to_pylist()
    if pa.types.is_fixed_size_list(array.type):
        width = array.type.list_size
        inner = _rows_with_nulls(array.values.slice(array.offset * width, len(array) * width))
        lengths = [width] * len(array)
    elif pa.types.is_list(array.type) or pa.types.is_large_list(array.type):
        inner = _rows_with_nulls(array.flatten())
        lengths = array.value_lengths().fill_null(0).to_pylist()
    else:
        return rows
    at = 0
    for i, length in enumerate(lengths):
        rows[i] = rows[i] or any(inner[at:at + length])
        at += length
    return rows


def _footer(shard: Shard, storage: UnitStorage) -> pq.FileMetaData:
    """Read once per decoder and handed to Arrow afterwards."""
    try:
        with storage.open(shard.url, shard.version) as raw:
            return pq.read_metadata(raw)
    except (pa.ArrowException, ValueError) as exc:
        raise UnreadableShard(f"shard {shard.url!r} is not a readable Parquet file: {exc}") from None


__all__ = ["SUFFIXES", "ParquetFormat", "ParquetLayout", "first_null_row", "index_files", "null_layout", "read_shard"]
