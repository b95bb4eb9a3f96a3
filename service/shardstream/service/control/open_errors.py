"""What opening a dataset raised, as the typed error a client can act on: never INTERNAL.

Formats raise DatasetNotFound, UnreadableShard, InvalidJobSpec... for what they foresee; storage
clients and readers raise whatever they raise (an aiohttp connection error, a botocore
ClientError, an ArrowInvalid from a file that is not what its name says). Those become the nearest
typed error, naming the dataset and the original error, and are logged with their traceback.
"""

from __future__ import annotations

import logging

from shardstream.proto.errors import (
    DatasetNotFound,
    ShardstreamError,
    StorageAccessDenied,
    UnreadableShard,
)

log = logging.getLogger(__name__)


def opening_error(dataset: tuple[str, ...], exc: Exception) -> ShardstreamError:
    """The typed error for `exc`, raised while opening `dataset` (not a ShardstreamError itself)."""
    shown = list(dataset) if len(dataset) <= 3 else [*dataset[:3], f"... ({len(dataset)} entries)"]
    cause = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, FileNotFoundError):
        return DatasetNotFound(f"dataset {shown} does not exist: {cause}")
    log.warning("opening dataset %s failed", shown, exc_info=exc)
    if isinstance(exc, PermissionError):
        return StorageAccessDenied(f"the service may not read dataset {shown} with its own credentials: {cause}")
    return UnreadableShard(f"the service could not open dataset {shown}: {cause}")


__all__ = ["opening_error"]
