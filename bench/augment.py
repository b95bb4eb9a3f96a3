"""The per-sample work every system does: JPEG decode, random crop, random flip, HWC -> CHW.

Pillow decodes (C code, as in shardstream's built-in ``image`` transform); the
crop and flip are numpy views, and one contiguous copy makes the uint8
[C, H, W] result. DataLoader and Ray Data use these functions; shardstream
runs its own ``image`` transform on the service and tf.data runs the same
steps as TensorFlow ops.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

import numpy as np
from PIL import Image


def decode_jpeg(data: bytes) -> np.ndarray:
    """uint8 [H, W, 3]."""
    with Image.open(io.BytesIO(data)) as encoded:
        encoded.load()
        rgb = encoded.convert("RGB")
    return np.asarray(rgb, dtype=np.uint8)


def crop_flip_chw(pixels: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    """A random size x size crop, flipped left-right with probability 1/2, as uint8 [3, size, size]."""
    height, width = pixels.shape[:2]
    if height < size or width < size:
        raise ValueError(f"image {height}x{width} is smaller than the crop {size}")
    top = int(rng.integers(0, height - size + 1))
    left = int(rng.integers(0, width - size + 1))
    crop = pixels[top : top + size, left : left + size]
    if rng.random() < 0.5:
        crop = crop[:, ::-1]
    return np.ascontiguousarray(crop.transpose(2, 0, 1))


def decode_crop_flip(data: bytes, size: int, rng: np.random.Generator) -> np.ndarray:
    return crop_flip_chw(decode_jpeg(data), size, rng)


def decode_batch(images: Sequence[bytes], size: int, rng: np.random.Generator) -> np.ndarray:
    """A batch of JPEGs into one preallocated uint8 [B, 3, size, size] array."""
    out = np.empty((len(images), 3, size, size), dtype=np.uint8)
    for i, data in enumerate(images):
        out[i] = decode_crop_flip(data, size, rng)
    return out


__all__ = ["crop_flip_chw", "decode_batch", "decode_crop_flip", "decode_jpeg"]
