"""Which file a job reads: each file's identity, pinned when the job opens and checked at every open.

A job's index records every file's version when the job opens (stat_file,
file_version): an object store's generation or ETag; for a local file, the
file its path resolves to (inode, size, mtime, ctime; symlinks followed).
Every later open of that file, on the head or on any decoder, compares the
opened file's own identity with the pinned one (check_opened): a local file's
from its open descriptor, so a path re-linked or rewritten between the check
and the read cannot slip through; an object's from the metadata its open
fetched, with no request more. A mismatch is DatasetChanged naming the file
and both identities: a job never mixes samples of two versions of a file.
"""

from __future__ import annotations

import os
from typing import Any

import fsspec

from shardstream.proto.errors import DatasetChanged


def file_version(info: dict[str, object]) -> str:
    """What changes when a file is rewritten, replaced or re-linked: the object's generation or
    ETag where the store keeps one (gcs, s3); for a local file (fsspec's info has its inode) the
    identity of the file a path resolves to now (`local_version`), symlinks followed."""
    if "ino" in info and isinstance(info.get("name"), str):
        return local_version(os.stat(str(info["name"])))
    for key in ("generation", "VersionId", "ETag", "etag", "mtime", "LastModified", "updated"):
        value = info.get(key)
        if value not in (None, ""):
            return f"{key}={value}"
    return ""


def local_version(st: os.stat_result) -> str:
    """A local file's identity from its stat: another file behind the same path (a new inode), a
    rewrite in place (mtime and ctime; ctime cannot be set back, as `touch -r` sets mtime), or a
    new length. The same string whether it comes from the path at open or from the opened
    descriptor at a read (os.fstat), so a read checks the very file it reads."""
    return f"mtime={st.st_mtime},ino={st.st_ino},size={st.st_size},ctime={st.st_ctime}"


def opened_version(fs: fsspec.AbstractFileSystem, path: str, raw: Any) -> str:
    """The identity of the file `raw` reads: a local file's from its open descriptor, an object's
    from the metadata its open fetched (gcsfs, s3fs), else the store's info now."""
    local = getattr(raw, "f", None)  # fsspec's LocalFileOpener wraps the real file object
    if local is not None and hasattr(local, "fileno"):
        return local_version(os.fstat(local.fileno()))
    details = getattr(raw, "details", None)
    return file_version(details if isinstance(details, dict) else fs.info(path))


def check_opened(url: str, version: str, fs: fsspec.AbstractFileSystem, path: str, raw: Any) -> None:
    """DatasetChanged unless the opened file is the one the job indexed (version "": not pinned,
    a manifest's listed files)."""
    if version:
        now = opened_version(fs, path, raw)
        if now != version:
            raise changed(url, version, now)


def changed(url: str, version: str, now: str) -> DatasetChanged:
    return DatasetChanged(f"{url!r} changed after the job opened it (it was {version!r}, it is now {now!r}): "
                          "the job reads only the files it indexed; open the job again to read the new data")


__all__ = ["changed", "check_opened", "file_version", "local_version", "opened_version"]
