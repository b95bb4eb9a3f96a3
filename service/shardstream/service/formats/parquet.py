"""Parquet: a shard is a file, a unit a row group. The index is built from footers alone."""

from __future__ import annotations

import logging
from typing import Any

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


def read_shard(url: str) -> tuple[Shard, pa.Schema]:
    """A shard's footer: size, rows, row groups, schema."""
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
    return Shard(url=url, size=size, num_rows=meta.num_rows, row_group_rows=rows, version=version), schema


def index_files(urls: list[str], columns: tuple[str, ...]) -> DatasetIndex:
    """Read every footer (in parallel) and check the schemas agree."""
    results = in_parallel(read_shard, urls, "shards")
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


def _footer(shard: Shard, storage: UnitStorage) -> pq.FileMetaData:
    """Read once per decoder and handed to Arrow afterwards."""
    try:
        with storage.open(shard.url, shard.version) as raw:
            return pq.read_metadata(raw)
    except (pa.ArrowException, ValueError) as exc:
        raise UnreadableShard(f"shard {shard.url!r} is not a readable Parquet file: {exc}") from None


__all__ = ["SUFFIXES", "ParquetFormat", "index_files", "read_shard"]
