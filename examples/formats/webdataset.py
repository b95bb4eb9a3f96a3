"""WebDataset tar shards: a sample is the members sharing a key, fields named by extension.

    .venv/bin/python examples/formats/webdataset.py --address 127.0.0.1:50051 [--data gs://bucket/shards/]

`.tar` names (or a directory of tars) are read as WebDataset; `jpg` goes through the image
transform, `cls` arrives as int64, `txt` as a list of strings.
"""

from __future__ import annotations

import io
import os
import tarfile

import numpy as np
from _common import run
from PIL import Image


def write_sample(directory: str) -> str:
    """Two shards of 10 samples each: 000000.jpg, 000000.cls, 000000.txt, ..."""
    rng = np.random.default_rng(0)
    for shard in range(2):
        with tarfile.open(os.path.join(directory, f"shard-{shard:06d}.tar"), "w") as tar:
            for i in range(shard * 10, shard * 10 + 10):
                jpg = io.BytesIO()
                Image.fromarray(rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)).save(jpg, format="JPEG")
                for field, data in {"jpg": jpg.getvalue(), "cls": str(i % 3).encode(),
                                    "txt": f"a photo, number {i}".encode()}.items():
                    member = tarfile.TarInfo(f"{i:06d}.{field}")
                    member.size = len(data)
                    tar.addfile(member, io.BytesIO(data))
    return directory


if __name__ == "__main__":
    run(__doc__.splitlines()[0], write_sample, transform="image",
        transform_args={"column": "jpg", "size": 32}, columns=["jpg", "cls", "txt"])
