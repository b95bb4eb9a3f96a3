"""Row groups from the dataset's store, every byte counted.

Files are opened without fsspec's read-ahead cache (``cache_type="none"``), so
each read Arrow asks for is one ranged read of exactly those bytes, and what
is counted is what the store served. A shard's footer is read once per actor
and handed to Arrow afterwards, and its version is checked against the one
the job indexed: a file rewritten since then is an error that says so, never
a silent mix of old and new rows.
"""

from __future__ import annotations

import threading
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from shardstream.proto.errors import DatasetNotFound, UnreadableShard
from shardstream.service.dataset import Shard, file_version
from shardstream.service.node.read_counters import SharedReadCounters


class CountingFile:
    """A read-only file object that counts the bytes it returns."""

    def __init__(self, raw: Any, counters: SharedReadCounters) -> None:
        self._raw = raw
        self._counters = counters

    def read(self, size: int = -1) -> bytes:
        data = self._raw.read(size)
        self._counters.count(storage_bytes=len(data))
        return data  # type: ignore[no-any-return]

    def __getattr__(self, name: str) -> Any:  # seek, tell, size, closed, ...
        return getattr(self._raw, name)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def close(self) -> None:
        self._raw.close()


class StorageReader:
    """Reads whole row groups (the selected columns) of a job's shards."""

    def __init__(self, counters: SharedReadCounters) -> None:
        self.counters = counters
        self._footers: dict[tuple[str, str], pq.FileMetaData] = {}
        self._reading: dict[tuple[str, str], threading.Lock] = {}
        self._lock = threading.Lock()

    def row_group(self, shard: Shard, row_group: int, columns: list[str] | None) -> pa.Table:
        try:
            metadata = self._footer(shard)
            fs, path = fsspec.core.url_to_fs(shard.url)
            with fs.open(path, "rb", cache_type="none") as raw:
                table = pq.ParquetFile(CountingFile(raw, self.counters), metadata=metadata).read_row_group(
                    row_group, columns=columns)
        except FileNotFoundError:
            raise DatasetNotFound(f"shard {shard.url!r} disappeared while the job was running") from None
        except (pa.ArrowException, OSError) as exc:
            raise UnreadableShard(f"cannot read row group {row_group} of {shard.url!r}: {exc}") from None
        self.counters.count(storage_reads=1)
        return table

    def _footer(self, shard: Shard) -> pq.FileMetaData:
        key = (shard.url, shard.version)
        with self._lock:
            metadata = self._footers.get(key)
            if metadata is not None:
                return metadata
            shard_lock = self._reading.setdefault(key, threading.Lock())
        with shard_lock:  # several row groups of one shard load at once: one footer read
            with self._lock:
                metadata = self._footers.get(key)
            if metadata is None:
                metadata = self._read_footer(shard)
                with self._lock:
                    self._footers[key] = metadata
                    self._reading.pop(key, None)
        return metadata

    def _read_footer(self, shard: Shard) -> pq.FileMetaData:
        fs, path = fsspec.core.url_to_fs(shard.url)
        version = file_version(fs.info(path))
        if version != shard.version:
            raise UnreadableShard(
                f"shard {shard.url!r} was rewritten after the job indexed it (version {shard.version!r}, "
                f"now {version!r}): open the job again to read the new data")
        with fs.open(path, "rb", cache_type="none") as raw:
            return pq.read_metadata(CountingFile(raw, self.counters))


__all__ = ["CountingFile", "StorageReader"]
