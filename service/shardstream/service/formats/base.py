"""What a dataset format is: a way of finding sample i, nothing more.

A format lists a dataset's files when a job opens and builds its index
(dataset.DatasetIndex: shards of samples in global order, cut into units),
and reads one unit as an Arrow table when a decoder needs it. Plans, the
local copy, the prepared-sample cache, transforms and the data plane see only
the index and those tables, so the order contract, exactly-once, resume and
the caches hold for every format alike.

Formats read storage through the decoder's `UnitStorage` (the actor's
storage_reader.StorageReader): every byte counted, files opened without
read-ahead, and each file's version checked against the one indexed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any, Protocol

import pyarrow as pa

from shardstream.service.dataset import DatasetIndex, Shard

Allow = Callable[[str], None]  # raises for a URL the service may not read (control/access.py)


class UnitStorage(Protocol):
    def open(self, url: str, version: str) -> AbstractContextManager[Any]:
        """The file, for ranged reads (seek + read), checked to be the version indexed."""

    def read_range(self, url: str, version: str, start: int, end: int) -> bytes:
        """Bytes [start, end) of the file."""

    def read_files(self, files: list[tuple[str, str]]) -> Iterator[bytes | BaseException]:
        """Whole files (url, version), fetched in parallel, in order: each its bytes or the error
        that reading it raised (a file-list format turns that into one corrupt sample)."""

    def memo(self, key: Any, make: Callable[[], Any]) -> Any:
        """`make()` once per decoder for `key` (a file's footer, its member table)."""


class DatasetFormat(Protocol):
    name: str

    def index(self, dataset: tuple[str, ...], args: dict[str, Any], columns: tuple[str, ...],
              allow: Allow) -> DatasetIndex:
        """List the files, build the index. Bad input raises an error naming the file and why."""

    def read_unit(self, shard: Shard, unit: int, columns: tuple[str, ...] | None,
                  storage: UnitStorage) -> pa.Table:
        """Unit `unit` of `shard`: its samples as rows, the selected columns (None: all)."""


def take_args(format_name: str, args: dict[str, Any], allowed: dict[str, Any]) -> dict[str, Any]:
    """`args` with defaults filled in from `allowed` (name -> default); an unknown name is an error."""
    from shardstream.proto.errors import InvalidJobSpec

    unknown = sorted(set(args) - set(allowed))
    if unknown:
        raise InvalidJobSpec(f"format {format_name!r} takes no option(s) {unknown}; "
                             f"its options are {sorted(allowed) or 'none'}")
    return {**allowed, **args}


__all__ = ["Allow", "DatasetFormat", "UnitStorage", "take_args"]
