"""Dataset discovery: fsspec URLs -> sorted Parquet shards with row offsets.

The global index of a sample is its position in the concatenation of the
dataset's files in sorted path order, rows in file order. This module builds
that index from Parquet footers only (no data is read) and fingerprints it,
so a plan can be rebuilt anywhere from (spec, fingerprint, epoch).
"""

from __future__ import annotations

import functools
import hashlib
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm

from shardstream.proto.errors import (
    DatasetNotFound,
    InvalidJobSpec,
    SchemaMismatch,
    UnreadableShard,
)

log = logging.getLogger(__name__)

PARQUET_SUFFIXES = (".parquet", ".parq", ".pq")
_GLOB_CHARS = set("*?[")


@dataclass(frozen=True)
class Shard:
    url: str
    size: int
    num_rows: int
    row_group_rows: tuple[int, ...]
    version: str = ""  # the store's generation/ETag, else mtime: a rewritten file gets a new one


@dataclass(frozen=True)
class DatasetIndex:
    """Shards in sorted order, their offsets, and the common schema."""

    shards: tuple[Shard, ...]
    schema: pa.Schema

    @property
    def num_rows(self) -> int:
        return sum(s.num_rows for s in self.shards)

    @property
    def file_starts(self) -> np.ndarray:
        """Global index of each shard's first row (len = shards + 1)."""
        return np.concatenate([[0], np.cumsum([s.num_rows for s in self.shards])]).astype(np.int64)

    @property
    def row_group_rows(self) -> tuple[int, ...]:
        """Rows of every row group, in global order."""
        return tuple(rows for shard in self.shards for rows in shard.row_group_rows)

    @functools.cached_property
    def fingerprint(self) -> str:
        """Computed once: every rank's OpenJob returns it."""
        h = hashlib.sha256()
        for s in self.shards:
            h.update(f"{s.url}\0{s.size}\0{s.num_rows}\0{s.version}\n".encode())
        h.update(self.schema.to_string(show_schema_metadata=False).encode())
        return h.hexdigest()[:16]

    def locate(self, index: int) -> tuple[str, int]:
        """(shard URL, row in shard) of a global index, for error messages."""
        shard = int(np.searchsorted(self.file_starts, index, side="right")) - 1
        return self.shards[shard].url, int(index - self.file_starts[shard])


def _filesystem(entry: str) -> tuple[fsspec.AbstractFileSystem, str]:
    try:
        return fsspec.core.url_to_fs(entry)
    except ImportError as exc:  # e.g. s3:// without s3fs installed where the service runs
        raise InvalidJobSpec(f"the service cannot read {entry!r}: {exc}") from None
    except ValueError as exc:  # an unknown protocol
        raise InvalidJobSpec(f"dataset URL {entry!r}: {exc}") from None


def canonical_url(entry: str) -> str:
    """`entry` as fsspec names it: protocol always spelled out, local paths absolute. Only the
    filesystem's class is used: naming a URL needs no credentials (making a GCS filesystem
    looks for them, which off a cloud VM waits out the metadata server)."""
    protocol = fsspec.core.split_protocol(entry)[0] or "file"
    try:
        cls = fsspec.get_filesystem_class(protocol)
    except ImportError as exc:  # e.g. s3:// without s3fs installed where the service runs
        raise InvalidJobSpec(f"the service cannot read {entry!r}: {exc}") from None
    except ValueError as exc:  # an unknown protocol
        raise InvalidJobSpec(f"dataset URL {entry!r}: {exc}") from None
    path = cls._strip_protocol(entry)
    protocols = (cls.protocol,) if isinstance(cls.protocol, str) else cls.protocol
    return f"{protocols[0]}://{path}"


def _allow_any(url: str) -> None:
    pass


def resolve_urls(dataset: tuple[str, ...], allow: Callable[[str], None] = _allow_any) -> list[str]:
    """Expand directories and globs into a sorted, de-duplicated list of shard URLs.

    `allow` raises for a URL the service may not read; it sees each entry before
    it is listed and each shard it resolves to.
    """
    urls: set[str] = set()
    for entry in dataset:
        allow(entry)
        fs, path = _filesystem(entry)
        if _GLOB_CHARS & set(path):
            found = [p for p in fs.glob(path) if not fs.isdir(p)]
            if not found:
                raise DatasetNotFound(f"no files match {entry!r}")
        elif fs.isdir(path):
            found = [p for p in fs.find(path) if _is_shard(p)]
            if not found:
                raise DatasetNotFound(f"directory {entry!r} holds no Parquet files ({', '.join(PARQUET_SUFFIXES)})")
        elif fs.exists(path):
            found = [path]
        else:
            raise DatasetNotFound(f"dataset path {entry!r} does not exist")
        urls.update(fs.unstrip_protocol(p) for p in found)
    for url in urls:
        allow(url)
    return sorted(urls)


def _is_shard(path: str) -> bool:
    name = path.rstrip("/").rsplit("/", 1)[-1]
    return name.endswith(PARQUET_SUFFIXES) and not name.startswith(("_", "."))


def file_version(info: dict[str, object]) -> str:
    """What changes when a file is rewritten: the object's generation or ETag where the store
    keeps one (gcs, s3), else the modification time (local files)."""
    for key in ("generation", "VersionId", "ETag", "etag", "mtime", "LastModified", "updated"):
        value = info.get(key)
        if value not in (None, ""):
            return f"{key}={value}"
    return ""


def read_shard(url: str) -> tuple[Shard, pa.Schema]:
    """A shard's footer: size, rows, row groups, schema."""
    try:
        fs, path = fsspec.core.url_to_fs(url)
        info = fs.info(path)
        size, version = int(info["size"]), file_version(info)
        with fs.open(path, "rb") as f:
            meta = pq.ParquetFile(f).metadata
            schema = meta.schema.to_arrow_schema()
    except FileNotFoundError:
        raise DatasetNotFound(f"shard {url!r} does not exist") from None
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise UnreadableShard(f"shard {url!r} is not a readable Parquet file: {exc}") from None
    rows = tuple(meta.row_group(i).num_rows for i in range(meta.num_row_groups))
    return Shard(url=url, size=size, num_rows=meta.num_rows, row_group_rows=rows, version=version), schema


def index_dataset(dataset: tuple[str, ...], columns: tuple[str, ...] = (), max_workers: int = 16,
                  allow: Callable[[str], None] = _allow_any) -> DatasetIndex:
    """Resolve, read every footer (in parallel), and check the schemas agree."""
    urls = resolve_urls(dataset, allow)
    log.info("indexing %d shard(s) of %s", len(urls), list(dataset))
    with ThreadPoolExecutor(max_workers=min(max_workers, len(urls))) as pool:
        # A bar only on a terminal (disable=None), for datasets with many shards.
        results = list(tqdm(pool.map(read_shard, urls), total=len(urls), desc="indexing shards",
                            unit="shard", disable=None if len(urls) >= 64 else True, leave=False))
    shards = tuple(shard for shard, _ in results)
    schemas = [_select(schema.remove_metadata(), columns, url) for (_, schema), url in zip(results, urls, strict=True)]
    first = schemas[0]
    for schema, url in zip(schemas[1:], urls[1:], strict=True):
        if not schema.equals(first):
            raise SchemaMismatch(
                f"shard {url!r} has schema [{_brief(schema)}] but {urls[0]!r} has [{_brief(first)}]"
            )
    index = DatasetIndex(shards=shards, schema=first)
    if index.num_rows == 0:
        raise DatasetNotFound(f"dataset {list(dataset)} has no rows ({len(urls)} empty shard(s))")
    return index


def _select(schema: pa.Schema, columns: tuple[str, ...], url: str) -> pa.Schema:
    if not columns:
        return schema
    missing = [c for c in columns if c not in schema.names]
    if missing:
        raise InvalidJobSpec(f"column(s) {missing} not in shard {url!r}; it has {schema.names}")
    return pa.schema([schema.field(c) for c in columns])


def _brief(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name}: {f.type}" for f in schema)


__all__ = ["DatasetIndex", "Shard", "file_version", "index_dataset", "read_shard", "resolve_urls"]
