"""Datasets of whole files, one sample per file: what image folders and manifests share.

The sample list (each file's URL and the sample's other columns) is made when
the job opens and travels with the index; decoders fetch the files' bytes.
Samples are cut into shards of up to 4,096 files and units of 8 files, and a
unit's files are fetched in parallel. A file that cannot be fetched because
it does not exist is one unreadable sample (named, failed or replaced under
``on_corrupt``), not a failed unit; any other storage error fails the unit as
it would for any format, so it is never kept in a cache.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import pyarrow as pa

from shardstream.proto.errors import ShardstreamError, UnreadableShard
from shardstream.service.dataset import UNREADABLE_COLUMN, Shard
from shardstream.service.formats.base import UnitStorage

SHARD_FILES = 4096
UNIT_FILES = 8


@dataclass(frozen=True)
class FileLayout:
    """A shard's files and its samples' other columns (row i is file i)."""

    urls: tuple[str, ...]
    versions: tuple[str, ...]  # each file's version when the job opened, "" for one that was not there
    columns: pa.Table
    bytes_column: str
    unit_files: int

    def sample_name(self, row: int) -> str:
        return f"file {self.urls[row]}"


def file_shards(name: str, where: str, urls: list[str], versions: list[str], sizes: list[int],
                columns: pa.Table, bytes_column: str, identity: str) -> tuple[Shard, ...]:
    """Shards of up to SHARD_FILES samples; `where` names them (the folder, the manifest) and
    `identity` says what the list was made from, for the caches' keys."""
    shards = []
    for first in range(0, len(urls), SHARD_FILES):
        last = min(first + SHARD_FILES, len(urls))
        digest = hashlib.sha256()
        for url, version in zip(urls[first:last], versions[first:last], strict=True):
            digest.update(f"{url}\0{version}\n".encode())
        count = last - first
        shards.append(Shard(
            url=f"{where}#{first}-{last - 1}", size=sum(sizes[first:last]), num_rows=count,
            row_group_rows=tuple(min(UNIT_FILES, count - u) for u in range(0, count, UNIT_FILES)),
            version=digest.hexdigest()[:16], format=name, reading=f"{name} {identity} unit={UNIT_FILES}",
            layout=FileLayout(tuple(urls[first:last]), tuple(versions[first:last]), columns.slice(first, count),
                              bytes_column, UNIT_FILES)))
    return tuple(shards)


def read_file_unit(shard: Shard, unit: int, columns: tuple[str, ...] | None, storage: UnitStorage) -> pa.Table:
    """The unit's rows: its other columns, and its files' bytes when that column is selected."""
    layout: FileLayout = shard.layout
    first = unit * layout.unit_files
    count = shard.row_group_rows[unit]
    table = layout.columns.slice(first, count)
    wanted = columns if columns is not None else (*table.column_names, layout.bytes_column)
    if layout.bytes_column not in wanted:
        return table.select(list(wanted))
    data: list[bytes | None] = []
    unreadable: list[str | None] = []
    files = list(zip(layout.urls[first:first + count], layout.versions[first:first + count], strict=True))
    for (url, _), fetched in zip(files, storage.read_files(files), strict=True):
        if isinstance(fetched, FileNotFoundError):
            data.append(None)
            unreadable.append(f"{url} does not exist")
        elif isinstance(fetched, ShardstreamError):  # DatasetChanged: the job's, not one sample's
            raise fetched
        elif isinstance(fetched, BaseException):
            raise UnreadableShard(f"cannot read {url}: {type(fetched).__name__}: {fetched}")
        else:
            data.append(fetched)
            unreadable.append(None)
    arrays = {name: pa.array(data, pa.binary()) if name == layout.bytes_column else table.column(name)
              for name in wanted}
    arrays[UNREADABLE_COLUMN] = pa.array(unreadable, pa.string())
    return pa.table(arrays)


__all__ = ["FileLayout", "file_shards", "read_file_unit"]
