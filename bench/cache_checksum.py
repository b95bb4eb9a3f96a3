"""What verifying cache entries costs: checksums compared on the entries' real sizes, and the whole
verification of a prepared-sample entry and of a local-copy row group.

    python -m bench.cache_checksum [--repeat-seconds 0.5]

Sizes: a prepared 224 x 224 x 3 uint8 picture (150,528 bytes, what the image transform's
``prepare`` keeps per sample) and local-copy row groups of 2 and 8 MB. Each checksum runs over the
same bytes, already in memory (as an entry is once read), best of 3 runs of about
`--repeat-seconds` each. Checksums whose package is not installed are listed as such: the service
uses CRC32C from ``google-crc32c`` (node/entry_checksum.py); ``crc32c`` and ``xxhash`` are only
compared here. The last rows time the service's own verification end to end: a prepared sample's
``decode_entry`` (checksum, header, key, array views) and a row group file's ``read_entry`` (map,
checksum, header, key, Arrow IPC), per entry and per GB, and the check each use of a mapped row
group costs (one stat of its file).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import os
import tempfile
import time
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from bench.report import markdown_table
from shardstream.service.node.local_copy_entry import key_fields, read_entry, stamp_of, write_entry
from shardstream.service.node.prepared_entry import SampleKey, decode_entry, encode_entry

SAMPLE_SHAPE = (224, 224, 3)
ROW_GROUP_BYTES = (2 << 20, 8 << 20)
KEY = SampleKey("0123456789abcdef0123456789abcdef", "gs://bucket/train/part-00042.parquet\x00734003200\x00"
                "1732400000000000", 1234)


def _optional(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


def checksums() -> dict[str, Callable[[np.ndarray], object] | None]:
    """name -> the function over a uint8 array (None: its package is not installed)."""
    google_crc32c, crc32c, xxhash = (_optional(m) for m in ("google_crc32c", "crc32c", "xxhash"))
    return {
        "crc32c (google-crc32c, chosen)": google_crc32c.value if google_crc32c else None,
        "crc32c (crc32c)": crc32c.crc32c if crc32c else None,
        "zlib.crc32": zlib.crc32,
        "xxh3_64 (xxhash)": xxhash.xxh3_64_intdigest if xxhash else None,
        "blake2b-128 (hashlib)": lambda data: hashlib.blake2b(data, digest_size=16).digest(),
        "sha256 (hashlib)": lambda data: hashlib.sha256(data).digest(),
    }


def best_seconds(call: Callable[[], object], repeat_s: float) -> float:
    """The best mean time of one call over 3 runs of about `repeat_s` each."""
    started, calls = time.perf_counter(), 0
    while time.perf_counter() - started < repeat_s / 10:
        call()
        calls += 1
    per_run = max(1, int(calls * 10))
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        for _ in range(per_run):
            call()
        best = min(best, (time.perf_counter() - started) / per_run)
    return best


def _row(name: str, nbytes: int, seconds: float) -> list[str]:
    return [name, f"{nbytes:,}", f"{seconds * 1e6:,.1f}", f"{seconds / nbytes * (1 << 30):.3f}",
            f"{nbytes / seconds / 1e9:,.1f}"]


def measure(repeat_s: float) -> list[list[str]]:
    rng = np.random.default_rng(0)
    sizes = [int(np.prod(SAMPLE_SHAPE)), *ROW_GROUP_BYTES]
    rows = []
    for nbytes in sizes:
        data = rng.integers(0, 256, nbytes, dtype=np.uint8)
        for name, function in checksums().items():
            if function is None:
                rows.append([name, f"{nbytes:,}", "not installed", "", ""])
                continue
            rows.append(_row(name, nbytes, best_seconds(lambda f=function, d=data: f(d), repeat_s)))
    sample = {"image": rng.integers(0, 256, SAMPLE_SHAPE, dtype=np.uint8), "label": 7}
    parts = encode_entry(KEY, sample)
    assert parts is not None
    entry = bytearray(b"".join(bytes(p) for p in parts))
    rows.append(_row("prepared sample: decode_entry (all checks)", len(entry),
                     best_seconds(lambda: decode_entry(entry, KEY), repeat_s)))
    with tempfile.TemporaryDirectory() as directory:
        for nbytes in ROW_GROUP_BYTES:
            table = pa.table({"x": pa.array(rng.integers(0, 256, nbytes, dtype=np.uint8))})
            path = str(Path(directory) / f"rg-{nbytes}")
            key = key_fields(KEY.shard, 3, ["x"])
            size = write_entry(path, key, table)
            read_entry(path, key)  # in the page cache, as a file just written or read
            rows.append(_row("local copy row group: read_entry (map + all checks)", size,
                             best_seconds(lambda p=path, k=key: read_entry(p, k), repeat_s)))
        stamp_seconds = best_seconds(lambda: stamp_of(os.stat(path)), repeat_s)
        rows.append(["local copy: stamp check of a mapped row group, each use", "-", f"{stamp_seconds * 1e6:.1f}",
                     "-", "-"])
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.cache_checksum", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat-seconds", type=float, default=0.5, help="length of each timed run")
    args = parser.parse_args(argv)
    table = markdown_table(["checksum / verification", "bytes", "us per entry", "s per GiB", "GB/s"],
                           measure(args.repeat_seconds))
    print(table)


if __name__ == "__main__":
    main()
