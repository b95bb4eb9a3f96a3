"""Dataset formats by name: one module each, the same contract for all (base.py).

``format=""`` (the default) picks one from the dataset's names: ``.tar``
shards are WebDataset, ``.bin``/``.npy`` files need ``format="tokens"`` (their
dtype and window are not in the name), anything else is Parquet.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from shardstream.proto.errors import DatasetNotFound, InvalidJobSpec
from shardstream.service.dataset import DatasetIndex
from shardstream.service.formats.base import Allow, DatasetFormat
from shardstream.service.formats.parquet import ParquetFormat
from shardstream.service.formats.tokens import TokenFormat

log = logging.getLogger(__name__)

FORMATS: dict[str, DatasetFormat] = {f.name: f for f in (ParquetFormat(), TokenFormat())}


def get_format(name: str) -> DatasetFormat:
    found = FORMATS.get(name)
    if found is None:
        raise InvalidJobSpec(f"unknown dataset format {name!r}; formats are {sorted(FORMATS)}")
    return found


def detect_format(dataset: tuple[str, ...]) -> str:
    """The format a dataset's names imply, for ``format=""``."""
    names = [entry.rstrip("/").lower() for entry in dataset]
    if names and all(name.endswith(".tar") for name in names) and "webdataset" in FORMATS:
        return "webdataset"
    return "parquet"


def _allow_any(url: str) -> None:
    pass


def index_dataset(dataset: tuple[str, ...], columns: tuple[str, ...] = (), allow: Allow = _allow_any,
                  format: str = "", format_args: dict[str, Any] | str | None = None) -> DatasetIndex:
    """The dataset's index, built by its format (named, or detected from the dataset's names)."""
    args = json.loads(format_args) if isinstance(format_args, str) else dict(format_args or {})
    name = format or detect_format(dataset)
    index = get_format(name).index(dataset, args, columns, allow)
    if index.num_rows == 0:
        raise DatasetNotFound(f"dataset {list(dataset)} has no rows ({len(index.shards)} empty shard(s))")
    return index


__all__ = ["FORMATS", "detect_format", "get_format", "index_dataset"]
