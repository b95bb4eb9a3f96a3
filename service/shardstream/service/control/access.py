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

Whatever the prefixes, a URL must name a storage protocol the service reads datasets from
(`dataset_protocols`: local files, gs://, s3:// by default). fsspec knows many more (http,
ftp, memory, zip, ...) that are no dataset store: http(s) would have the service fetch any URL
a client names, from inside its network, and memory:// would read the service's own process.
"""

from __future__ import annotations

import os

import fsspec

from shardstream.proto.errors import DatasetNotAllowed, InvalidJobSpec
from shardstream.service.dataset import canonical_url
from shardstream.service.limits import DATASET_PROTOCOLS

LOCAL = "file://"


def _resolved(canonical: str) -> str:
    """A canonical URL; a local path with its symlinks resolved."""
    return LOCAL + os.path.realpath(canonical[len(LOCAL):]) if canonical.startswith(LOCAL) else canonical


class DatasetAccess:
    """`prefixes` a dataset must lie under; none: any dataset, unless `none_means_any` is False
    (an identity's empty list in the tokens file grants nothing)."""

    def __init__(self, prefixes: tuple[str, ...], none_means_any: bool = True,
                 protocols: tuple[str, ...] = DATASET_PROTOCOLS) -> None:
        self.prefixes = tuple(_resolved(canonical_url(p)).rstrip("/") for p in prefixes)
        self.none_means_any = none_means_any
        self.protocols = protocols

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
        """Raise InvalidJobSpec unless `url` names a dataset protocol, and DatasetNotAllowed unless it
        lies under an allowed prefix."""
        check_protocol(url, self.protocols)
        why = self.refusal(url)
        if why == "dots":
            raise DatasetNotAllowed(f"dataset URL {url!r} has '.' or '..' path components, which this "
                                    "service (it has allowed_dataset_prefixes) does not accept")
        if why is not None:
            raise DatasetNotAllowed(f"dataset {url!r} is outside the prefixes this service may read "
                                    f"({', '.join(self.prefixes)}); its operator sets them "
                                    "(allowed_dataset_prefixes)")


def check_protocol(url: str, protocols: tuple[str, ...] = DATASET_PROTOCOLS) -> None:
    """InvalidJobSpec naming `url`'s protocol unless it is one of `protocols` (an unknown one, or one
    whose package is not installed, says so too: canonical_url)."""
    protocol = canonical_url(url).split("://", 1)[0]
    if protocol not in protocols:
        spelled = fsspec.core.split_protocol(url)[0] or protocol
        raise InvalidJobSpec(f"dataset URL {url[:200]!r}: this service does not read datasets over "
                             f"{spelled}://; it reads {', '.join(p + '://' for p in protocols)} (its "
                             "dataset_protocols setting)")


__all__ = ["DatasetAccess", "check_protocol"]
