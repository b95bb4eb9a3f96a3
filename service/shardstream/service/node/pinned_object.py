"""An object store file read at the version a job pinned, not whatever is live now.

Checking the version an open fetched leaves a window: an object replaced between that
metadata call and the range reads after it would be read as the new object. So every ranged
read names the pinned version:

- GCS serves a named generation (``?generation=``): while it is live the bytes are the pinned
  object's, and once it has been replaced (without object versioning) the read is a 404;
- S3 serves a named ``VersionId`` in a versioned bucket, and otherwise answers a read made
  ``If-Match`` the pinned ETag only while the live object has that ETag (else 412).

A read the store refuses for the version is DatasetChanged here, never the new object's bytes.
The file object is what pyarrow and the formats read through: seek, tell, read.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

from fsspec.asyn import sync

from shardstream.proto.errors import DatasetChanged

GCS_PREFIXES = ("gs://", "gcs://")
S3_PREFIXES = ("s3://", "s3a://")
S3_REFUSALS = frozenset({"PreconditionFailed", "NoSuchVersion", "412"})


@dataclass(frozen=True)
class Pin:
    """The version every read of an object names: `field` is generation, VersionId or ETag."""

    field: str
    value: str

    def describe(self) -> str:
        return f"{self.field} {self.value}"


def pinned_version(url: str, version: str) -> Pin | None:
    """The version to read `url` at, when its store serves reads of a named version (gs://, s3://)."""
    fields = ("generation",) if url.startswith(GCS_PREFIXES) else (
        ("VersionId", "ETag") if url.startswith(S3_PREFIXES) else ())
    for field in fields:
        if version.startswith(f"{field}="):
            return Pin(field, version[len(field) + 1:])
    return None


class PinnedObject(io.RawIOBase):
    """A read-only file of `size` bytes: each read is one ranged GET of the pinned version."""

    def __init__(self, fs: Any, path: str, url: str, pin: Pin, size: int) -> None:
        self._fs, self._path, self._url, self._pin = fs, path, url, pin
        self._size, self._position = size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def size(self) -> int:
        return self._size

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._size}[whence]
        self._position = max(0, base + offset)
        return self._position

    def read(self, size: int | None = -1) -> bytes:
        end = self._size if size is None or size < 0 else min(self._size, self._position + size)
        if end <= self._position:
            return b""
        try:
            if self._pin.field == "generation":
                data = self._fs.cat_file(self._path, start=self._position, end=end, generation=self._pin.value)
            else:
                data = sync(self._fs.loop, _s3_range, self._fs, self._path, self._position, end, self._pin)
        except OSError as exc:  # FileNotFoundError: a generation GCS no longer serves
            if isinstance(exc, FileNotFoundError) or _s3_refused(exc):
                raise DatasetChanged(f"{self._url!r} changed after the job opened it ({self._pin.describe()} is no "
                                     "longer served): the job reads only the files it indexed; open the job again "
                                     "to read the new data") from None
            raise
        self._position += len(data)
        return bytes(data)

    def readall(self) -> bytes:
        return self.read(-1)


async def _s3_range(fs: Any, path: str, start: int, end: int, pin: Pin) -> bytes:
    """Bytes start..end-1 of an S3 object at `pin` (s3fs's own request call, with the version or
    the If-Match its ranged reads do not take)."""
    bucket, key, _ = fs.split_path(path)
    named = {"VersionId": pin.value} if pin.field == "VersionId" else {"IfMatch": pin.value}
    response = await fs._call_s3("get_object", Bucket=bucket, Key=key, Range=f"bytes={start}-{end - 1}", **named)
    try:
        return bytes(await response["Body"].read())
    finally:
        response["Body"].close()


def _s3_refused(exc: BaseException) -> bool:
    """Whether S3 refused a read for its version (s3fs raises an OSError from botocore's error)."""
    cause = exc.__cause__
    error = getattr(cause, "response", {}).get("Error", {}) if cause is not None else {}
    return str(error.get("Code", "")) in S3_REFUSALS


__all__ = ["Pin", "PinnedObject", "pinned_version"]
