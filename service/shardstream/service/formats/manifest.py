"""A manifest: a Parquet or CSV table with a column of file URLs and any other columns.

Each row is a sample, in the order of the manifest files (sorted by path) and
their rows. The table is read when the job opens (its other columns travel
with the index: labels, captions, boxes); the decoders fetch each row's file
into a column named ``bytes`` (or ``bytes_column=``, or the transform's
``column`` argument). URLs may be absolute (any fsspec URL) or relative to
the manifest's directory; each is checked against the service's allowed
dataset prefixes. A URL that does not exist is one unreadable sample, named
by its URL.

The dataset's identity is the manifest files' (size and version): a manifest
names files by URL and is rewritten to change them; a file rewritten in
place under the same URL is not noticed.
"""

from __future__ import annotations

import hashlib
import logging
import posixpath
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from shardstream.proto.errors import (
    DatasetNotFound,
    InvalidJobSpec,
    SchemaMismatch,
    UnreadableShard,
)
from shardstream.service.dataset import (
    DatasetIndex,
    Shard,
    brief,
    check_columns,
    resolve_urls,
    stat_file,
)
from shardstream.service.formats.base import Allow, UnitStorage, take_args
from shardstream.service.formats.files import file_shards, read_file_unit
from shardstream.service.formats.listed_versions import listed_versions

log = logging.getLogger(__name__)

SUFFIXES = (".parquet", ".parq", ".pq", ".csv")
OPTIONS = {"url_column": "url", "bytes_column": "bytes"}


def _read_table(url: str) -> tuple[pa.Table, str]:
    """A manifest file's rows and its identity (URL, size, version)."""
    fs, path, size, version = stat_file(url, "manifest")
    try:
        with fs.open(path, "rb") as f:
            table = pacsv.read_csv(f) if path.lower().endswith(".csv") else pq.read_table(f)
    except FileNotFoundError:
        raise DatasetNotFound(f"manifest {url!r} does not exist") from None
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise UnreadableShard(f"manifest {url!r} is not a readable {'CSV' if url.lower().endswith('.csv') else 'Parquet'} "
                              f"table: {exc}") from None
    return table.replace_schema_metadata(None), f"{url}\0{size}\0{version}"


def _absolute(url: str, manifest: str) -> str:
    """A URL as written in a manifest: relative ones are under the manifest's directory."""
    if "://" in url or url.startswith("/"):
        return url
    return posixpath.join(posixpath.dirname(manifest), url)


class ManifestFormat:
    name = "manifest"

    def index(self, dataset: tuple[str, ...], args: dict[str, Any], columns: tuple[str, ...],
              allow: Allow) -> DatasetIndex:
        args = take_args(self.name, args, OPTIONS)
        url_column, bytes_column = args["url_column"], args["bytes_column"]
        manifests = resolve_urls(dataset, allow, SUFFIXES, "manifest (Parquet or CSV)")
        tables: list[pa.Table] = []
        identities: list[str] = []
        urls: list[str] = []
        for manifest in manifests:
            table, identity = _read_table(manifest)
            if url_column not in table.column_names:
                raise InvalidJobSpec(f"manifest {manifest!r} has no URL column {url_column!r} (url_column=); "
                                     f"its columns are {table.column_names}")
            if bytes_column in table.column_names:
                raise InvalidJobSpec(f"manifest {manifest!r} already has a column {bytes_column!r}, where the "
                                     "files' bytes would go: choose another bytes_column=")
            column = table.column(url_column)
            if column.null_count or not pa.types.is_string(column.type):
                raise InvalidJobSpec(f"manifest {manifest!r}: column {url_column!r} must hold a URL in every row "
                                     f"(type {column.type}, {column.null_count} empty)")
            urls.extend(_absolute(u, manifest) for u in column.to_pylist())
            tables.append(table)
            identities.append(identity)
        first = tables[0].schema
        for table, manifest in zip(tables[1:], manifests[1:], strict=True):
            if not table.schema.equals(first):
                raise SchemaMismatch(f"manifest {manifest!r} has columns [{brief(table.schema)}] but "
                                     f"{manifests[0]!r} has [{brief(first)}]")
        for url in urls:
            allow(url)
        rows = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
        log.info("read %d manifest(s) of %s: %d files", len(manifests), list(dataset), len(urls))
        where = manifests[0] if len(manifests) == 1 else f"{posixpath.dirname(manifests[0])}/(manifests)"
        identity = hashlib.sha256("\n".join(identities).encode()).hexdigest()[:16]
        shards = file_shards(self.name, where, urls, listed_versions(urls), [0] * len(urls), rows,
                             bytes_column, f"{identity} {url_column}")
        schema = pa.schema([*rows.schema, pa.field(bytes_column, pa.binary())])
        return DatasetIndex(shards=shards, schema=check_columns(schema, columns, f"manifest {manifests[0]!r}"),
                            format=self.name)

    def read_unit(self, shard: Shard, unit: int, columns: tuple[str, ...] | None,
                  storage: UnitStorage) -> pa.Table:
        return read_file_unit(shard, unit, columns, storage)


__all__ = ["ManifestFormat"]
