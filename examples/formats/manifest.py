"""A manifest (format="manifest"): a CSV or Parquet table with a column of file URLs and any other columns.

    .venv/bin/python examples/formats/manifest.py --address 127.0.0.1:50051 [--data gs://bucket/manifest.csv]

The table is read when the job opens; the decoders fetch each row's file into the transform's
column (here `image`). Relative URLs are under the manifest's directory.
"""

from __future__ import annotations

import os

import numpy as np
from _common import run
from PIL import Image


def write_sample(directory: str) -> str:
    rng = np.random.default_rng(0)
    os.makedirs(os.path.join(directory, "photos"))
    rows = ["path,label"]
    for i in range(12):
        Image.fromarray(rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)).save(
            os.path.join(directory, "photos", f"{i}.png"))
        rows.append(f"photos/{i}.png,{i % 4}")
    manifest = os.path.join(directory, "manifest.csv")
    with open(manifest, "w") as f:
        f.write("\n".join(rows) + "\n")
    return manifest


if __name__ == "__main__":
    run(__doc__.splitlines()[0], write_sample, format="manifest", url_column="path", columns=["image", "label"],
        transform="image", transform_args={"column": "image", "size": 32})
