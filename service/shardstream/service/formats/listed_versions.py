"""Each file a manifest names, pinned when the job opens: its version from one listing per directory.

A manifest may name millions of files; a metadata request for each at open would take minutes.
They usually lie in a few directories, so each directory they name is listed once (in parallel),
and each file's version (generation, ETag, a local file's identity) taken from its listing. A
file the listing does not hold is "" (not pinned): it did not exist when the job opened, and a
read finds it missing (one unreadable sample) or, if it appeared since, reads it unpinned.
"""

from __future__ import annotations

import posixpath
from collections import defaultdict

import fsspec

from shardstream.service.dataset import canonical_url, in_parallel
from shardstream.service.file_identity import file_version


def listed_versions(urls: list[str]) -> list[str]:
    """The version of each of `urls` when the job opens, "" for a file not there."""
    canonical = [canonical_url(url) for url in urls]  # as a listing names them: "/x" is file:///x
    by_directory: dict[str, set[str]] = defaultdict(set)
    for url in canonical:
        by_directory[posixpath.dirname(url)].add(url)

    def listing(directory: str) -> dict[str, str]:
        fs, path = fsspec.core.url_to_fs(directory)
        try:
            entries = fs.ls(path, detail=True)
        except FileNotFoundError:
            return {}
        wanted = by_directory[directory]
        versions = {}
        for info in entries:
            url = canonical_url(fs.unstrip_protocol(info["name"]))
            if url in wanted and info.get("type") != "directory":
                versions[url] = file_version(info)
        return versions

    found: dict[str, str] = {}
    for versions in in_parallel(listing, sorted(by_directory), "directories"):
        found.update(versions)
    return [found.get(url, "") for url in canonical]


__all__ = ["listed_versions"]
