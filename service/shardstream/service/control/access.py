"""Which datasets the service may read for its clients (`allowed_dataset_prefixes`).

The service reads storage with its own credentials, so on a shared service any
client could name any bucket or path those credentials reach. With prefixes
configured, every dataset entry a client names, and every shard it resolves to,
must lie under one of them, compared as canonical fsspec URLs at a path
boundary (`gs://team-a` admits `gs://team-a/x`, not `gs://team-a-private/x`).
Entries are checked before anything is listed, so a refused client learns
nothing about what exists. URLs with `.` or `..` components are refused
outright: fsspec does not normalise them, and a store may or may not. Local
paths are compared after resolving symlinks, so a link under an allowed
directory that points outside it is refused too.
No prefixes (the default) allow every URL, as a laptop or single-team service wants.
"""

from __future__ import annotations

import os

from shardstream.proto.errors import DatasetNotAllowed
from shardstream.service.dataset import canonical_url

LOCAL = "file://"


def _resolved(canonical: str) -> str:
    """A canonical URL; a local path with its symlinks resolved."""
    return LOCAL + os.path.realpath(canonical[len(LOCAL):]) if canonical.startswith(LOCAL) else canonical


class DatasetAccess:
    def __init__(self, prefixes: tuple[str, ...]) -> None:
        self.prefixes = tuple(_resolved(canonical_url(p)).rstrip("/") for p in prefixes)

    def check(self, url: str) -> None:
        """Raise DatasetNotAllowed unless `url` lies under an allowed prefix."""
        if not self.prefixes:
            return
        canonical = canonical_url(url)
        if {".", ".."} & set(canonical.split("://", 1)[-1].split("/")):
            raise DatasetNotAllowed(f"dataset URL {url!r} has '.' or '..' path components, which this "
                                    "service (it has allowed_dataset_prefixes) does not accept")
        resolved = _resolved(canonical)
        if not any(resolved == p or resolved.startswith(p + "/") for p in self.prefixes):
            raise DatasetNotAllowed(f"dataset {url!r} is outside the prefixes this service may read "
                                    f"({', '.join(self.prefixes)}); its operator sets them "
                                    "(allowed_dataset_prefixes)")


__all__ = ["DatasetAccess"]
