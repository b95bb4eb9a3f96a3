"""Units from the dataset's store, every byte counted.

Files are opened without fsspec's read-ahead cache (``cache_type="none"``), so
each read a format asks for is one ranged read of exactly those bytes, and
what is counted is what the store served. Every open checks the file it opened
against the identity the job pinned when it indexed the dataset: for a local
file the opened descriptor's own stat (so a path swapped for a symlink to
another file, or a file rewritten in place, is caught on the very read that
would have returned its bytes), for an object store the generation, VersionId or ETag the
open fetched; a gs:// or s3:// object is then read at that version (pinned_object.py),
so it cannot be replaced between the check and the read. A mismatch is
`DatasetChanged` naming the file and both identities, never a silent mix of old
and new samples.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import fsspec
import pyarrow as pa

from shardstream.proto.errors import DatasetNotFound, ShardstreamError, UnreadableShard
from shardstream.service.dataset import Shard
from shardstream.service.file_identity import check_opened
from shardstream.service.formats import get_format
from shardstream.service.node.pinned_object import PinnedObject, pinned_version
from shardstream.service.node.read_counters import SharedReadCounters

FILE_FETCHERS = 16  # whole files of a unit fetched at once (file-list formats: latency, not CPU)


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
    """Reads whole units of a job's shards through their format (formats/), counting every byte.

    It is the formats' `UnitStorage`: files opened without read-ahead, each open checked against
    the file identity the job indexed, per-decoder memos (footers, member tables) made once
    however many threads ask at once."""

    def __init__(self, counters: SharedReadCounters) -> None:
        self.counters = counters
        self._memo: dict[Any, Any] = {}
        self._making: dict[Any, threading.Lock] = {}
        self._lock = threading.Lock()
        self._fetchers = ThreadPoolExecutor(FILE_FETCHERS, thread_name_prefix="shardstream-fetch")

    def row_group(self, shard: Shard, row_group: int, columns: list[str] | None) -> pa.Table:
        """Unit `row_group` of `shard` (a Parquet row group, a run of a format's samples)."""
        try:
            table = get_format(shard.format).read_unit(shard, row_group, tuple(columns) if columns is not None
                                                       else None, self)
        except ShardstreamError:
            raise
        except FileNotFoundError:
            raise DatasetNotFound(f"shard {shard.url!r} disappeared while the job was running") from None
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise UnreadableShard(f"cannot read unit {row_group} of {shard.url!r}: {exc}") from None
        self.counters.count(storage_reads=1)
        return table

    @contextlib.contextmanager
    def open(self, url: str, version: str) -> Iterator[CountingFile]:
        fs, path = fsspec.core.url_to_fs(url)
        try:
            raw = fs.open(path, "rb", cache_type="none")
        except FileNotFoundError:
            raise DatasetNotFound(f"{url!r} disappeared while the job was running") from None
        with raw:
            check_opened(url, version, fs, path, raw)
            pin = pinned_version(url, version)
            if pin is not None:  # every read at the pinned version, not the live object
                yield CountingFile(PinnedObject(fs, path, url, pin, int(raw.size)), self.counters)
            else:
                yield CountingFile(raw, self.counters)

    def read_range(self, url: str, version: str, start: int, end: int) -> bytes:
        with self.open(url, version) as f:
            f.seek(start)
            data = f.read(end - start)
        if len(data) != end - start:
            raise UnreadableShard(f"{url!r} ends at byte {start + len(data)}, before byte {end} that the "
                                  "index expects: the file is truncated")
        return data

    def read_files(self, files: list[tuple[str, str]]) -> Iterator[bytes | BaseException]:
        def fetch(entry: tuple[str, str]) -> bytes | BaseException:
            try:
                with self.open(*entry) as f:  # counted, checked, at the pinned version
                    return bytes(f.read())
            except Exception as exc:  # one file's fault is one sample's, named by the caller
                return exc

        return self._fetchers.map(fetch, files)

    def memo(self, key: Any, make: Callable[[], Any]) -> Any:
        with self._lock:
            if key in self._memo:
                return self._memo[key]
            key_lock = self._making.setdefault(key, threading.Lock())
        with key_lock:  # several units of one file load at once: one footer read
            with self._lock:
                if key in self._memo:
                    return self._memo[key]
            value = make()
            with self._lock:
                self._memo[key] = value
                self._making.pop(key, None)
        return value



__all__ = ["CountingFile", "StorageReader"]
