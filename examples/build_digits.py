"""Build a small, real Parquet dataset from scikit-learn's bundled handwritten digits.

    python examples/build_digits.py --out .demo/digits

writes ``<out>/train/part-00000.parquet ...`` (the training shards the service
streams) and ``<out>/test/part-00000.parquet`` (a held-out split), with columns
``pixels`` (fixed_size_list<float32>[64], 0..1) and ``label`` (int64).

The digits ship inside scikit-learn, so this works offline. A manifest
(``<out>/_manifest.json``) records a hash of what was written; a rerun with the
same content does nothing, so the demo can call this every time.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import shutil
import sys
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

FEATURES = 64  # 8x8 images
PIXEL_MAX = 16.0  # load_digits intensities are 0..16
TEST_FRACTION = 0.2
SPLIT_SEED = 0
TRAIN_SHARDS = 4
ROW_GROUP_SIZE = 128  # several row groups per shard, so the service reads them piecemeal
FORMAT_VERSION = 1  # bump when the layout changes, so old builds are rebuilt
MANIFEST = "_manifest.json"


def load_split() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The digits as (pixels in 0..1 float32, int64 labels), split stratified and seeded
    so every build (and every machine) produces the same train/test rows."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    pixels = (digits.data / PIXEL_MAX).astype(np.float32)
    labels = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(
        pixels, labels, test_size=TEST_FRACTION, random_state=SPLIT_SEED, stratify=labels)
    return {"train": (x_train, y_train), "test": (x_test, y_test)}


def to_table(pixels: np.ndarray, labels: np.ndarray) -> pa.Table:
    """Arrow table with the fixed-size-list column the client turns into a [B, 64] tensor."""
    flat = pa.array(np.ascontiguousarray(pixels).reshape(-1), type=pa.float32())
    return pa.table({
        "pixels": pa.FixedSizeListArray.from_arrays(flat, FEATURES),
        "label": pa.array(labels, type=pa.int64()),
    })


def content_hash(splits: dict[str, tuple[np.ndarray, np.ndarray]]) -> str:
    """Fingerprint of the data and layout: equal hashes mean an existing build can be reused."""
    h = hashlib.sha256(f"v{FORMAT_VERSION}/{TRAIN_SHARDS}/{ROW_GROUP_SIZE}".encode())
    for name in sorted(splits):
        x, y = splits[name]
        h.update(name.encode())
        h.update(np.ascontiguousarray(x).tobytes())
        h.update(np.ascontiguousarray(y).tobytes())
    return h.hexdigest()


def shard_plan(splits: dict[str, tuple[np.ndarray, np.ndarray]]) -> dict[str, list[tuple[int, int]]]:
    """(start, stop) row ranges per split: the train split is cut into several shards so the
    service has more than one file to spread over its decoders; the test split is one file."""
    plan: dict[str, list[tuple[int, int]]] = {}
    for name, (_, y) in splits.items():
        shards = TRAIN_SHARDS if name == "train" else 1
        bounds = np.linspace(0, len(y), shards + 1).astype(int)
        plan[name] = [(int(a), int(b)) for a, b in itertools.pairwise(bounds)]
    return plan


def read_manifest(out: str) -> dict | None:
    """The manifest of an earlier build, or None if there is none (or it is unreadable)."""
    try:
        with open(os.path.join(out, MANIFEST)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def is_built(out: str, digest: str) -> bool:
    """True when the manifest matches and every file it lists is still there."""
    manifest = read_manifest(out)
    if not manifest or manifest.get("sha256") != digest:
        return False
    return all(os.path.isfile(os.path.join(out, rel)) for rel in manifest.get("files", []))


def write_split(out: str, name: str, x: np.ndarray, y: np.ndarray,
                ranges: list[tuple[int, int]]) -> list[str]:
    """Write one split's shards into a fresh directory; stale shards from an older layout
    would otherwise be picked up by the service, which reads every Parquet file it finds."""
    directory = os.path.join(out, name)
    shutil.rmtree(directory, ignore_errors=True)
    os.makedirs(directory)
    written = []
    for i, (start, stop) in enumerate(ranges):
        rel = os.path.join(name, f"part-{i:05d}.parquet")
        pq.write_table(to_table(x[start:stop], y[start:stop]), os.path.join(out, rel),
                       row_group_size=ROW_GROUP_SIZE)
        written.append(rel)
    return written


def write_manifest(out: str, digest: str, files: list[str],
                   splits: dict[str, tuple[np.ndarray, np.ndarray]]) -> None:
    """Written last and atomically, so an interrupted build is never mistaken for a finished one."""
    manifest = {"sha256": digest, "files": files,
                "rows": {name: len(y) for name, (_, y) in splits.items()}}
    tmp = os.path.join(out, MANIFEST + ".tmp")
    with open(tmp, "w") as f:
        json.dump(manifest, f, indent=2)
    os.replace(tmp, os.path.join(out, MANIFEST))


def build(out: str) -> bool:
    """Build the dataset into `out`; returns False when an identical build was already there."""
    splits = load_split()
    digest = content_hash(splits)
    if is_built(out, digest):
        return False
    os.makedirs(out, exist_ok=True)
    try:
        os.remove(os.path.join(out, MANIFEST))  # invalid until the new build completes
    except FileNotFoundError:
        pass
    plan = shard_plan(splits)
    files: list[str] = []
    for name, (x, y) in splits.items():
        files += write_split(out, name, x, y, plan[name])
    write_manifest(out, digest, files, splits)
    return True


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="output directory (gets train/ and test/)")
    args = parser.parse_args(argv)
    out = os.path.abspath(args.out)
    built = build(out)
    manifest = read_manifest(out) or {}
    rows = manifest.get("rows", {})
    state = "built" if built else "already built"
    print(f"digits dataset {state} in {out}: {rows.get('train')} train rows in "
          f"{TRAIN_SHARDS} shards, {rows.get('test')} test rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
