"""What a dataset is once opened: shards of samples in global order, cut into units.

The global index of a sample is its position in the concatenation of the
dataset's shards in sorted path order, samples in shard order. A format
(formats/) builds the index when a job opens, from metadata only where it can
(Parquet footers, file sizes, tar headers), and reads one unit (a Parquet row
group, a run of token windows, a run of tar samples) as an Arrow table when a
decoder needs it. Everything downstream (plans, caches, transforms, the data
plane) sees only this index and those tables. The index is fingerprinted, so a
plan can be rebuilt anywhere from (spec, fingerprint, epoch).
"""

from __future__ import annotations

import functools
import hashlib
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import fsspec
import numpy as np
import pyarrow as pa
from tqdm import tqdm

from shardstream.proto.errors import DatasetNotFound, InvalidJobSpec
from shardstream.service.file_identity import file_version

log = logging.getLogger(__name__)

_GLOB_CHARS = set("*?[")
# A column a format adds when it could not read a sample (a file a manifest names that does not
# exist): why, or null. The decoder fails (or under on_corrupt="skip" replaces) that sample alone.
UNREADABLE_COLUMN = "__unreadable__"


@dataclass(frozen=True)
class Shard:
    """A run of samples in global order, read unit by unit (`row_group_rows`: samples per unit).

    For Parquet a shard is a file and a unit a row group. Formats whose samples are not rows of
    one file say how they cut and read theirs in `reading` (part of every identity: the local
    copy's keys, the prepared cache's folders, the fingerprint) and keep what reading needs in
    `layout` (offsets, file lists), which travels with the index to the decoders."""

    url: str
    size: int
    num_rows: int
    row_group_rows: tuple[int, ...]
    version: str = ""  # the store's generation/ETag, else mtime: a rewritten file gets a new one
    format: str = "parquet"
    reading: str = ""  # how units are cut and decoded, with the options that change them; "": Parquet's
    layout: Any = field(default=None, compare=False, repr=False)

    @property
    def identity(self) -> str:
        """What names this shard's samples: a rewritten file, or another way to read it, differs."""
        base = f"{self.url}\0{self.size}\0{self.version}"
        return f"{base}\0{self.reading}" if self.reading else base

    def sample_name(self, row: int) -> str:
        """Where sample `row` of this shard is, for error messages: the file and row or member."""
        name = getattr(self.layout, "sample_name", None)
        return name(row) if name is not None else f"row {row} of {self.url}"


@dataclass(frozen=True)
class DatasetIndex:
    """Shards in sorted order, their offsets, and the common schema."""

    shards: tuple[Shard, ...]
    schema: pa.Schema
    format: str = "parquet"
    # A mixture's sources in order, (name, samples): each a run of consecutive global indices
    # (mixture_index.py); () for one dataset.
    sources: tuple[tuple[str, int], ...] = ()

    @functools.cached_property
    def source_starts(self) -> np.ndarray:
        """A mixture's first global index of each source, and the end (len = sources + 1)."""
        return np.concatenate([[0], np.cumsum([rows for _, rows in self.sources])]).astype(np.int64)

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
            reading = f"\0{s.reading}" if s.reading else ""  # Parquet's fingerprints as before formats
            h.update(f"{s.url}\0{s.size}\0{s.num_rows}\0{s.version}{reading}\n".encode())
        h.update(self.schema.to_string(show_schema_metadata=False).encode())
        for name, rows in self.sources:  # a file moved from one source to another changes the mixture
            h.update(f"source\0{name}\0{rows}\n".encode())
        return h.hexdigest()[:16]

    def locate(self, index: int) -> tuple[str, int]:
        """(shard URL, row in shard) of a global index, for error messages."""
        shard = int(np.searchsorted(self.file_starts, index, side="right")) - 1
        return self.shards[shard].url, int(index - self.file_starts[shard])

    def describe(self, index: int) -> str:
        """Where sample `index` is, in words: "row 3 of gs://b/x.parquet", "member k.jpg of ..." """
        shard = int(np.searchsorted(self.file_starts, index, side="right")) - 1
        return self.shards[shard].sample_name(int(index - self.file_starts[shard]))


def filesystem(entry: str) -> tuple[fsspec.AbstractFileSystem, str]:
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


def allow_any(url: str) -> None:
    """The access check of a service with no allowed_dataset_prefixes (control/access.py)."""


def stat_file(url: str, what: str) -> tuple[fsspec.AbstractFileSystem, str, int, str]:
    """(filesystem, path, size, version) of a file a dataset lists; DatasetNotFound naming it as
    `what` ("shard", "token file", "manifest") when it does not exist."""
    try:
        fs, path = fsspec.core.url_to_fs(url)
        info = fs.info(path)
    except FileNotFoundError:
        raise DatasetNotFound(f"{what} {url!r} does not exist") from None
    return fs, path, int(info["size"]), file_version(info)


def resolve_urls(dataset: tuple[str, ...], allow: Callable[[str], None] = allow_any,
                 suffixes: tuple[str, ...] = (".parquet", ".parq", ".pq"), kind: str = "Parquet") -> list[str]:
    """Expand directories and globs into a sorted, de-duplicated list of file URLs: a directory
    contributes the files under it whose names end with one of `suffixes` (`kind` names them in
    errors), a glob or a path whatever it names.

    `allow` raises for a URL the service may not read; it sees each entry before
    it is listed and each file it resolves to.
    """
    urls: set[str] = set()
    for entry in dataset:
        allow(entry)
        fs, path = filesystem(entry)
        if _GLOB_CHARS & set(path):
            found = [p for p in fs.glob(path) if not fs.isdir(p)]
            if not found:
                raise DatasetNotFound(f"no files match {entry!r}")
        elif fs.isdir(path):
            found = [p for p in fs.find(path) if is_listed(p, suffixes)]
            if not found:
                raise DatasetNotFound(f"directory {entry!r} holds no {kind} files ({', '.join(suffixes)})")
        elif fs.exists(path):
            found = [path]
        else:
            raise DatasetNotFound(f"dataset path {entry!r} does not exist")
        urls.update(fs.unstrip_protocol(p) for p in found)
    for url in urls:
        allow(url)
    return sorted(urls)


def is_listed(path: str, suffixes: tuple[str, ...]) -> bool:
    """A data file of a directory listing: the right suffix, not hidden, not a marker (_SUCCESS)."""
    name = path.rstrip("/").rsplit("/", 1)[-1]
    return name.lower().endswith(suffixes) and not name.startswith(("_", "."))


def check_columns(schema: pa.Schema, columns: tuple[str, ...], where: str) -> pa.Schema:
    """`schema` narrowed to `columns` (all when empty); a column it lacks is an error naming `where`."""
    if not columns:
        return schema
    missing = [c for c in columns if c not in schema.names]
    if missing:
        raise InvalidJobSpec(f"column(s) {missing} not in {where}; it has {schema.names}")
    return pa.schema([schema.field(c) for c in columns])


def in_parallel(work: Callable[[Any], Any], items: list[Any], what: str, max_workers: int = 16) -> list[Any]:
    """`work` over `items` on threads (storage latency, not CPU), in order; a progress bar on a
    terminal when there are many."""
    if not items:
        return []
    with ThreadPoolExecutor(max_workers=min(max_workers, len(items))) as pool:
        return list(tqdm(pool.map(work, items), total=len(items), desc=f"indexing {what}", unit=what.rstrip("s"),
                         disable=None if len(items) >= 64 else True, leave=False))


def brief(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name}: {f.type}" for f in schema)


__all__ = ["UNREADABLE_COLUMN", "DatasetIndex", "Shard", "allow_any", "brief", "canonical_url", "check_columns", "file_version", "in_parallel",
           "is_listed", "resolve_urls", "stat_file"]
