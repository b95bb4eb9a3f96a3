"""An ImageNet-style folder (format="imagefolder"): one sub-directory per class, as torchvision's ImageFolder.

    .venv/bin/python examples/formats/imagefolder.py --address 127.0.0.1:50051 [--data gs://bucket/train/]

Classes are the sub-directories sorted by name (label = position), samples the image files in
torchvision's order; a batch is image (after the transform) and label.
"""

from __future__ import annotations

import os

import numpy as np
from _common import run
from PIL import Image


def write_sample(directory: str) -> str:
    rng = np.random.default_rng(0)
    for label in ("n01440764", "n01443537", "n01484850"):
        os.makedirs(os.path.join(directory, label))
        for i in range(5):
            pixels = rng.integers(0, 256, (40, 56, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(os.path.join(directory, label, f"{label}_{i}.JPEG"))
    return directory


if __name__ == "__main__":
    run(__doc__.splitlines()[0], write_sample, format="imagefolder", transform="image",
        transform_args={"size": 32, "mode": "random_crop"})
