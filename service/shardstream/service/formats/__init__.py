"""Dataset formats by name: one module each, the same contract for all (base.py).

``format=""`` (the default) picks one from the dataset's names: ``.tar``
shards (or directories of them) are WebDataset, anything else is Parquet.
Token files, image folders and manifests are named (``format="tokens"``...):
their names do not say how to read them. JSON Lines are named too
(``format="jsonl"``): their columns are inferred from their values, which a
user opts into, and format="" keeps meaning what it meant before they existed.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from shardstream.proto.errors import DatasetNotFound, InvalidJobSpec
from shardstream.service.dataset import DatasetIndex, allow_any, filesystem, is_listed
from shardstream.service.formats.base import Allow, DatasetFormat
from shardstream.service.formats.imagefolder import ImageFolderFormat
from shardstream.service.formats.jsonl import JsonlFormat
from shardstream.service.formats.manifest import ManifestFormat
from shardstream.service.formats.parquet import SUFFIXES as PARQUET_SUFFIXES
from shardstream.service.formats.parquet import ParquetFormat
from shardstream.service.formats.tokens import TokenFormat
from shardstream.service.formats.webdataset import SUFFIXES as TAR_SUFFIXES
from shardstream.service.formats.webdataset import WebDatasetFormat
from shardstream.service.limits import DEFAULT_LIMITS

log = logging.getLogger(__name__)

FORMATS: dict[str, DatasetFormat] = {f.name: f for f in (ParquetFormat(), TokenFormat(), WebDatasetFormat(),
                                                     ImageFolderFormat(), ManifestFormat(), JsonlFormat())}


def get_format(name: str) -> DatasetFormat:
    found = FORMATS.get(name)
    if found is None:
        raise InvalidJobSpec(f"unknown dataset format {name!r}; formats are {sorted(FORMATS)}")
    return found


def detect_format(dataset: tuple[str, ...], allow: Allow) -> str:
    """The format a dataset's names imply, for ``format=""``: WebDataset when its entries are
    ``.tar`` files (``.tar.gz``, ``.tgz``: refused by it, by name), or directories holding tar files and no
    Parquet; else Parquet."""
    kinds = {_kind(entry, allow) for entry in dataset}
    return "webdataset" if kinds == {"webdataset"} else "parquet"


def _kind(entry: str, allow: Allow) -> str:
    name = entry.rstrip("/").lower()
    if name.endswith(TAR_SUFFIXES):  # .tar, and compressed tars the format refuses by name
        return "webdataset"
    if name.endswith(PARQUET_SUFFIXES) or set("*?[") & set(name):
        return "parquet"
    allow(entry)  # checked before anything is listed
    fs, path = filesystem(entry)
    try:
        if not fs.isdir(path):
            return "parquet"
        files = [p for p in fs.find(path) if is_listed(p, PARQUET_SUFFIXES + TAR_SUFFIXES)]
    except FileNotFoundError:
        return "parquet"  # the Parquet format says it does not exist
    tars = any(p.lower().endswith(TAR_SUFFIXES) for p in files)
    return "webdataset" if tars and not any(p.lower().endswith(PARQUET_SUFFIXES) for p in files) else "parquet"


def index_dataset(dataset: tuple[str, ...], columns: tuple[str, ...] = (), allow: Allow = allow_any,
                  format: str = "", format_args: dict[str, Any] | str | None = None) -> DatasetIndex:
    """The dataset's index, built by its format (named, or detected from the dataset's names)."""
    args = json.loads(format_args) if isinstance(format_args, str) else dict(format_args or {})
    name = format or detect_format(dataset, allow)
    index = get_format(name).index(dataset, args, columns, allow)
    if index.num_rows == 0:
        raise DatasetNotFound(f"dataset {list(dataset)} has no rows ({len(index.shards)} empty shard(s))")
    return index


def job_format_args(format: str, format_args: dict[str, Any] | str | None, transform_args: dict[str, Any],
                    max_line_bytes: int = DEFAULT_LIMITS.line_bytes) -> dict[str, Any]:
    """A job's format options as the service completes them: a manifest's bytes go to the
    transform's column unless `bytes_column` says otherwise; a JSON line is at most the service's
    `max_line_bytes` setting unless the job asks for less (spec_limits.py refuses more)."""
    args = json.loads(format_args) if isinstance(format_args, str) else dict(format_args or {})
    column = transform_args.get("column")
    if format == "manifest" and "bytes_column" not in args and isinstance(column, str):
        args["bytes_column"] = column
    if format == "jsonl" and "max_line_bytes" not in args:
        args["max_line_bytes"] = max_line_bytes
    return args


__all__ = ["FORMATS", "detect_format", "get_format", "index_dataset", "job_format_args"]
