"""The check a native JPEG crop passes before it is used: its crops of a few JPEGs of every kind it
may be given equal the Python path's (simplejpeg's full decode, cropped and flipped), byte for byte.

A libjpeg other than the libjpeg-turbo it was built against (another IDCT, another upsampling)
would decode otherwise; this finds it when the library is loaded, in a few milliseconds, instead of
letting one node's batches differ from another's.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
from PIL import Image

from shardstream.service.transforms import jpeg_crop, jpeg_decode

SIZE = (37, 53)  # height, width: odd, so every subsampling has partial blocks at the edges
CROP = (21, 30)
# Pillow's `subsampling` option: 0 = 4:4:4, 1 = 4:2:2, 2 = 4:2:0.
KINDS: tuple[tuple[str, int, dict[str, Any]], ...] = (
    ("baseline 4:2:0", 3, {"subsampling": 2}),
    ("baseline 4:2:2", 3, {"subsampling": 1}),
    ("progressive 4:4:4", 3, {"subsampling": 0, "progressive": True}),
    ("grayscale", 1, {}),
)


def _image(channels: int) -> np.ndarray:
    """Smooth gradients with noise on top: every IDCT coefficient and upsampling step matters."""
    height, width = SIZE
    y, x = np.mgrid[0:height, 0:width]
    noise = np.random.default_rng(7).integers(0, 64, (height, width, 3))
    pixels = np.stack([x * 4, y * 6, (x + y) * 3], axis=-1) + noise
    pixels = pixels.astype(np.uint8)
    return pixels if channels == 3 else np.ascontiguousarray(pixels[:, :, 1])


def _jpeg(channels: int, options: dict[str, Any]) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(_image(channels)).save(buffer, format="JPEG", quality=90, **options)
    return buffer.getvalue()


def mismatch() -> str:
    """"" when every crop equals the Python path's, else which one did not."""
    height, width = CROP
    for name, encoded_channels, options in KINDS:
        data = _jpeg(encoded_channels, options)
        header = jpeg_decode.jpeg_size(data)
        if header is None:
            return f"{name}: its header does not read"
        for channels in (3, 1):
            full = jpeg_decode.decode(data, channels, header)
            if full is None:
                return f"{name}: the Python path does not decode it"
            for top, left, flip in ((0, 0, False), (SIZE[0] - height, SIZE[1] - width, True), (7, 11, True)):
                expected = full[top : top + height, left : left + width]
                expected = (expected[:, ::-1] if flip else expected).transpose(2, 0, 1)
                out = np.empty((channels, height, width), np.uint8)
                if not jpeg_crop.crop_into(data, channels, header[0], header[1], top, left, flip, out):
                    return f"{name} as {channels} channel(s): not decoded"
                if not np.array_equal(out, expected):
                    return f"{name} as {channels} channel(s), crop at ({top}, {left}): other pixels"
    return ""


__all__ = ["mismatch"]
