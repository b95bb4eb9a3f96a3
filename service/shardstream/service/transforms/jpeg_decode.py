"""Which decoder decodes a JPEG: libjpeg-turbo through simplejpeg where its pixels are Pillow's.

Pillow decodes a JPEG with libjpeg's defaults (the accurate integer IDCT,
fancy upsampling) unless it is asked for a reduced ("draft") decode; so does
simplejpeg's TurboJPEG call with ``fastdct`` and ``fastupsample`` off, and
it writes the pixels straight into a numpy array: about 1.4x fewer CPU-s
per image here, without Pillow's image object, its RGBX pixel layout and the
``tobytes`` copy out of it. The two must give the same bytes, since a
batch's pixels must not depend on which node decoded it or on which
libraries it had: ``decode`` takes the simplejpeg path only for what the
tests in tests/unit/service/transforms/test_jpeg_decode.py prove identical (YCbCr and
grayscale baseline and progressive JPEGs, 4:4:4, 4:2:2, 4:2:0, 4:4:0 and
4:1:1 subsampling, restart markers, odd sizes, EXIF and ICC segments;
grayscale to 3 channels included), at full size. It returns None for
everything else, which Pillow then decodes as before: CMYK and YCCK, RGB-
coded JPEGs, a decode Pillow would reduce (``draft``), images over Pillow's
decompression-bomb limit, anything that is not a JPEG, and a JPEG
simplejpeg finds damaged (strict mode: libjpeg's warnings too), so a corrupt
file raises the same error as before, from Pillow.
"""

from __future__ import annotations

import logging

import numpy as np
from PIL import Image

log = logging.getLogger(__name__)

try:
    import simplejpeg
except ImportError:  # a service without it decodes everything with Pillow
    simplejpeg = None

JPEG_MAGIC = b"\xff\xd8\xff"
SUBSAMPLINGS = frozenset({"444", "422", "420", "440", "411", "Gray"})
COLORSPACES = {1: {"YCbCr": "GRAY", "Gray": "GRAY"}, 3: {"YCbCr": "RGB", "Gray": "RGB"}}


def jpeg_size(data: bytes) -> tuple[int, int, str, str] | None:
    """(width, height, colour space, subsampling) of a JPEG simplejpeg can read, else None."""
    if simplejpeg is None or not data.startswith(JPEG_MAGIC):
        return None
    try:
        height, width, colorspace, subsampling = simplejpeg.decode_jpeg_header(data)
    except (ValueError, TypeError):
        return None
    return int(width), int(height), str(colorspace), str(subsampling)


def decodes_like_pillow(header: tuple[int, int, str, str], channels: int) -> bool:
    """Whether a JPEG with this header (from `jpeg_size`) is one libjpeg-turbo decodes as Pillow does
    (at full size), into `channels`."""
    width, height, colorspace, subsampling = header
    return (colorspace in COLORSPACES[channels] and subsampling in SUBSAMPLINGS
            and (Image.MAX_IMAGE_PIXELS is None or width * height <= Image.MAX_IMAGE_PIXELS))


def decode(data: bytes, channels: int, header: tuple[int, int, str, str]) -> np.ndarray | None:
    """The full-size pixels (uint8 [H, W, channels]) of a JPEG whose `header` (from `jpeg_size`)
    says it is one simplejpeg decodes as Pillow does; None: decode it with Pillow."""
    width, height, colorspace, _ = header
    if not decodes_like_pillow(header, channels):
        return None
    target = COLORSPACES[channels][colorspace]
    try:
        pixels = simplejpeg.decode_jpeg(data, colorspace=target, fastdct=False, fastupsample=False,
                                        strict=True)
    except (ValueError, TypeError):
        return None  # Pillow decodes it, or raises what it always raised
    if pixels.shape[:2] != (height, width):
        return None
    return pixels if pixels.ndim == 3 else pixels[:, :, None]


__all__ = ["COLORSPACES", "SUBSAMPLINGS", "decode", "decodes_like_pillow", "jpeg_size"]
