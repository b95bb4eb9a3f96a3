"""A cache entry that does not prove what it is: why, and what it costs (a miss, counted and logged).

Every read of the prepared-sample cache (both tiers and samples fetched from another node) and of
the local copy verifies the entry's key and checksum. An entry that fails, or a path that cannot be
read, is a miss: it is dropped, the sample or row group is read again from storage, and the fault
is counted per node, cache and cause (Prometheus ``shardstream_cache_faults_total``) with one
warning naming the path. A fault never fails a step.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil

from shardstream.service.node.read_counters import SharedReadCounters
from shardstream.service.node_messages import CAUSES

log = logging.getLogger(__name__)

# Why an entry was refused. checksum: its bytes (header included) are not the ones written;
# key: a sound entry of another sample or row group; short_read: shorter than it says;
# format: not an entry of this format (no magic, a header that does not describe the bytes);
# io_error: the path cannot be read (a directory, no permission, a failing disk).


class CacheFault(Exception):
    """An entry refused on reading; `cause` is one of CAUSES."""

    def __init__(self, cause: str, detail: str) -> None:
        if cause not in CAUSES:
            raise ValueError(f"unknown cache fault cause {cause!r}")
        super().__init__(f"{cause}: {detail}")
        self.cause = cause
        self.detail = detail


def record_fault(counters: SharedReadCounters, cache: str, path: str, fault: CacheFault) -> None:
    """Count the fault (per cache and cause; the node is the pool's) and log it once, with its path."""
    counters.fault(cache, fault.cause)
    log.warning("cache fault in %s: %s (%s): dropped, read again from storage", cache, path, fault)


def drop_path(path: str, expected_inode: int | None = None) -> None:
    """Remove a refused entry where possible: a file, or a directory found in a file's place.

    With `expected_inode`, a file is removed only while it is still the one found damaged (another
    actor may have replaced it with a sound entry meanwhile)."""
    try:
        if expected_inode is not None and os.lstat(path).st_ino != expected_inode:
            return
        os.unlink(path)
    except IsADirectoryError:
        shutil.rmtree(path, ignore_errors=True)
    except OSError as exc:
        if exc.errno in (errno.EISDIR, errno.EPERM) and os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            log.debug("cannot remove refused cache entry %s: %s", path, exc)


__all__ = ["CacheFault", "drop_path", "record_fault"]
