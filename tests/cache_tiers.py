"""Prepared-sample tiers for tests: small chunks, and an entry's bytes where the tier stores them."""

from __future__ import annotations

import os

from shardstream.service.node.prepared_tier import SampleTier

CHUNK = 1 << 20  # chunks of 1 MiB: a test's tier of a few MiB still has several


def chunked_tier(name: str, directory: object, max_bytes: int = 16 << 20, chunk_bytes: int = CHUNK) -> SampleTier:
    """A tier with small chunks, allocated as writes need them."""
    return SampleTier(name, str(directory), max_bytes, chunk_bytes=chunk_bytes)


def stored_entry(tier_: SampleTier, folder: str, row: int) -> tuple[str, int, bytes]:
    """(chunk path, offset, the entry's bytes) as stored, read from the file itself."""
    place = tier_.locate(folder, row)
    assert place is not None, f"row {row} of {folder} is not held"
    path, offset = place
    with open(path, "rb") as f:
        f.seek(offset)
        prefix = f.read(24)
        length = int.from_bytes(prefix[16:24], "little")
        return path, offset, prefix + f.read(length - 24)


def overwrite(path: str, offset: int, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, data, offset)
    finally:
        os.close(fd)
