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
    """`prefixes` a dataset must lie under; none: any dataset, unless `none_means_any` is False
    (an identity's empty list in the tokens file grants nothing)."""

    def __init__(self, prefixes: tuple[str, ...], none_means_any: bool = True) -> None:
        self.prefixes = tuple(_resolved(canonical_url(p)).rstrip("/") for p in prefixes)
        self.none_means_any = none_means_any

    def refusal(self, url: str) -> str | None:
        """Why `url` is not admitted ("dots": it has '.' or '..' components; "outside": it lies under
        none of the prefixes), or None when it is."""
        if not self.prefixes and self.none_means_any:
            return None
        canonical = canonical_url(url)
        if {".", ".."} & set(canonical.split("://", 1)[-1].split("/")):
            return "dots"
        resolved = _resolved(canonical)
        if not any(resolved == p or resolved.startswith(p + "/") for p in self.prefixes):
            return "outside"
        return None

    def check(self, url: str) -> None:
        """Raise DatasetNotAllowed unless `url` lies under an allowed prefix."""
        why = self.refusal(url)
        if why == "dots":
            raise DatasetNotAllowed(f"dataset URL {url!r} has '.' or '..' path components, which this "
                                    "service (it has allowed_dataset_prefixes) does not accept")
        if why is not None:
            raise DatasetNotAllowed(f"dataset {url!r} is outside the prefixes this service may read "
                                    f"({', '.join(self.prefixes)}); its operator sets them "
                                    "(allowed_dataset_prefixes)")


__all__ = ["DatasetAccess"]
