"""An object store file read at the generation a job pinned, not whatever is live now.

Checking the generation an open fetched leaves a window: an object replaced between that
metadata call and the range reads after it would be read as the new object. GCS serves a
named generation (`?generation=` on every read); while it is live the bytes are the pinned
object's, and once it has been replaced (without object versioning) the read is a 404, which
is DatasetChanged here, never the new object's bytes. The file object is what pyarrow and the
formats read through: seek, tell, read.
"""

from __future__ import annotations

import io
from typing import Any

from shardstream.proto.errors import DatasetChanged

GENERATION = "generation="


def pinned_generation(url: str, version: str) -> str | None:
    """The generation to read `url` at, when its store serves named generations (gs://)."""
    if url.startswith(("gs://", "gcs://")) and version.startswith(GENERATION):
        return version[len(GENERATION):]
    return None


class PinnedObject(io.RawIOBase):
    """A read-only file of `size` bytes: each read is one ranged GET of that generation."""

    def __init__(self, fs: Any, path: str, url: str, generation: str, size: int) -> None:
        self._fs, self._path, self._url, self._generation = fs, path, url, generation
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
            data = self._fs.cat_file(self._path, start=self._position, end=end, generation=self._generation)
        except FileNotFoundError:
            raise DatasetChanged(f"{self._url!r} changed after the job opened it (generation {self._generation} "
                                 "is no longer served): the job reads only the files it indexed; open the job "
                                 "again to read the new data") from None
        self._position += len(data)
        return bytes(data)

    def readall(self) -> bytes:
        return self.read(-1)


__all__ = ["PinnedObject", "pinned_generation"]
