"""JPEGs of every kind a camera or an encoder makes, and what Pillow alone makes of them: the
reference the image transform's decoders are compared with (test_jpeg_decode.py, test_jpeg_crop.py)."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import simplejpeg
from PIL import Image

from bench.workload import encode_jpeg, synthetic_image
from shardstream.service.transforms.image import ImageTransform


def photo(width: int, height: int, seed: int = 1) -> np.ndarray:
    return np.ascontiguousarray(synthetic_image(seed, width * 31 + height, max(width, height))[:height, :width])


def pillow_jpeg(pixels: np.ndarray, **options: Any) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG", **options)
    return buffer.getvalue()


def pillow_prepare(transform: ImageTransform, data: bytes) -> np.ndarray:
    """What prepare() gave before the simplejpeg path, written out with Pillow alone: the oracle."""
    with Image.open(io.BytesIO(data)) as encoded:
        if encoded.format == "JPEG":
            encoded.draft(transform.pil_mode, transform._needed_size(encoded.width, encoded.height))
        encoded.load()
        img = encoded.convert(transform.pil_mode)
    if transform.mode == "resize":
        img = img.resize((transform.width, transform.height), Image.Resampling.BILINEAR)
    else:
        img = transform._fit(img)
        if transform.mode == "center_crop":
            top, left = (img.height - transform.height) // 2, (img.width - transform.width) // 2
            img = img.crop((left, top, left + transform.width, top + transform.height))
    pixels = np.asarray(img, dtype=np.uint8)
    return pixels if pixels.ndim == 3 else pixels[:, :, None]


PHOTO = photo(256, 256)
ODD = photo(257, 131, seed=2)
EXIF = Image.Exif()
EXIF[0x0112] = 6  # orientation: rotated (neither decoder applies it)
EXIF[0x010F] = "Camera"

# Each decoded by simplejpeg, and each must equal Pillow's decode.
JPEG_KINDS = {
    "workload q90": encode_jpeg(PHOTO, 90),
    "baseline 4:4:4 q97": pillow_jpeg(PHOTO, quality=97, subsampling=0),
    "baseline 4:2:2 q75": pillow_jpeg(PHOTO, quality=75, subsampling=1),
    "baseline 4:2:0 q90": pillow_jpeg(PHOTO, quality=90, subsampling=2),
    "progressive 4:2:0": pillow_jpeg(PHOTO, quality=90, subsampling=2, progressive=True),
    "progressive 4:4:4": pillow_jpeg(PHOTO, quality=95, subsampling=0, progressive=True),
    "optimized Huffman tables": pillow_jpeg(PHOTO, quality=85, optimize=True),
    "restart markers": pillow_jpeg(PHOTO, quality=90, restart_marker_blocks=3),
    "odd size 4:2:0": pillow_jpeg(ODD, quality=90, subsampling=2),
    "odd size 4:2:2 progressive": pillow_jpeg(ODD, quality=90, subsampling=1, progressive=True),
    "odd size 4:4:0": simplejpeg.encode_jpeg(ODD, quality=85, colorsubsampling="440"),
    "odd size 4:1:1": simplejpeg.encode_jpeg(ODD, quality=85, colorsubsampling="411"),
    "EXIF and ICC segments": pillow_jpeg(PHOTO, quality=90, exif=EXIF.tobytes(), icc_profile=b"\0" * 600),
    "grayscale": pillow_jpeg(np.ascontiguousarray(ODD[:, :, 0]), quality=90),
    "grayscale progressive": pillow_jpeg(np.ascontiguousarray(PHOTO[:, :, 1]), quality=90, progressive=True),
}


def cmyk_jpeg() -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(PHOTO).convert("CMYK").save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def png() -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(PHOTO).save(buffer, format="PNG")
    return buffer.getvalue()
