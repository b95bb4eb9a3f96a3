"""Files a built-in transform reads besides the dataset (the tokenize transform's tokenizer.json).

Such a file decides every sample's bytes as much as a shard does, and the service reads it with
its own credentials, so it is held to what a dataset is held to:

- at job open its URL passes the same access check as the dataset's entries (the service's
  `dataset_protocols` and `allowed_dataset_prefixes`, and the caller's own prefixes): a client
  cannot have the service read a file outside them (`argument_urls` names the arguments);
- it is identified by its content's SHA-256 (`TransformFile`): in the job's manifest (a resume
  with another tokenizer is refused naming it) and in the prepared-sample cache's key (a changed
  file never serves samples made with the old one);
- the hash read at open is pinned: a decode actor that reads other bytes refuses the job with
  DatasetChanged naming the file (`check_pinned`), as a rewritten shard is refused.

`read_file` reads one through fsspec, at most MAX_FILE_BYTES, and keeps the latest ones (up to
KEPT_BYTES) per process by (URL, version), so each decode actor reads a tokenizer once, not once
per job.
"""

from __future__ import annotations

import collections
import hashlib
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import fsspec

from shardstream.proto.errors import (
    DatasetChanged,
    InvalidJobSpec,
    StorageAccessDenied,
    UnreadableShard,
)
from shardstream.service.file_identity import file_version, opened_version

MAX_FILE_BYTES = 256 << 20  # the largest tokenizer.json in use is ~35 MB
KEPT_BYTES = 128 << 20  # files a process keeps read (by URL and version), the latest first
# The arguments of each built-in transform that name a file it reads.
FILE_ARGUMENTS: dict[str, tuple[str, ...]] = {"tokenize": ("tokenizer",)}


@dataclass(frozen=True)
class TransformFile:
    """A file as a transform read it: its URL and its content's SHA-256 (hex)."""

    url: str
    sha256: str

    def record(self) -> dict[str, str]:
        """As the manifest holds it."""
        return {"url": self.url, "sha256": self.sha256}


def argument_urls(name: str, args: Mapping[str, Any]) -> dict[str, str]:
    """argument -> URL of the files transform `name` will read with `args` (strings only: another
    value is the transform's own error)."""
    return {arg: args[arg] for arg in FILE_ARGUMENTS.get(name, ()) if isinstance(args.get(arg), str)}


def files_of(transform: Any) -> dict[str, TransformFile]:
    """argument -> the file a built transform read for it ({} for a transform that reads none)."""
    files = getattr(transform, "files", None)
    return dict(files) if isinstance(files, Mapping) else {}


def check_pinned(transform: Any, pinned: Mapping[str, str]) -> None:
    """DatasetChanged unless every file the transform read here is the one the job opened with
    (`pinned`: URL -> SHA-256, read by the control plane at open)."""
    for arg, file in files_of(transform).items():
        expected = pinned.get(file.url)
        if expected is not None and expected != file.sha256:
            raise DatasetChanged(f"the {arg} file {file.url!r} changed after the job opened it (sha256 "
                                 f"{expected[:16]} then, {file.sha256[:16]} now): open the job again to use it")


_KEPT: collections.OrderedDict[tuple[str, str], tuple[bytes, str]] = collections.OrderedDict()
_LOCK = threading.Lock()


def read_file(url: str, what: str) -> tuple[bytes, str]:
    """(the file's bytes, their SHA-256 hex), from this process's few kept files when `url`'s
    version is unchanged. Errors name the file as `what` ("tokenizer file"): InvalidJobSpec when it
    does not exist or is too large, StorageAccessDenied or UnreadableShard when it cannot be read."""
    try:
        fs, path = fsspec.core.url_to_fs(url)
        info = fs.info(path)
        version = file_version(info)
        with _LOCK:
            kept = _KEPT.get((url, version)) if version else None
            if kept is not None:
                _KEPT.move_to_end((url, version))
                return kept
        if info.get("type") == "directory":
            raise InvalidJobSpec(f"{what} {url!r} is a directory, not a file")
        size = int(info.get("size") or 0)
        if size > MAX_FILE_BYTES:
            raise InvalidJobSpec(f"{what} {url!r} is {size:,} bytes, above the {MAX_FILE_BYTES:,} a transform "
                                 "may read")
        with fs.open(path, "rb") as raw:
            version = opened_version(fs, path, raw) or version
            data = raw.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise InvalidJobSpec(f"{what} {url!r} does not exist") from None
    except PermissionError as exc:
        raise StorageAccessDenied(f"the service may not read {what} {url!r}: {exc}") from None
    except (InvalidJobSpec, StorageAccessDenied):
        raise
    except (OSError, ValueError) as exc:  # a store's own errors; an unknown protocol
        raise UnreadableShard(f"the service could not read {what} {url!r}: {type(exc).__name__}: {exc}") from None
    if len(data) > MAX_FILE_BYTES:
        raise InvalidJobSpec(f"{what} {url!r} is above the {MAX_FILE_BYTES:,} bytes a transform may read")
    found = (data, hashlib.sha256(data).hexdigest())
    if version:
        with _LOCK:
            _KEPT[(url, version)] = found
            while len(_KEPT) > 1 and sum(len(kept[0]) for kept in _KEPT.values()) > KEPT_BYTES:
                _KEPT.popitem(last=False)
    return found


__all__ = ["FILE_ARGUMENTS", "MAX_FILE_BYTES", "TransformFile", "argument_urls", "check_pinned", "files_of",
           "read_file"]
