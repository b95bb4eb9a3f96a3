"""A JPEG decoded, cropped, flipped and written as the batch's planes in one native call.

The Python path decodes a full-size image into a new array (jpeg_decode.py),
then a strided copy reads it back from memory into the batch's CHW rows. The
native loop (service/native/jpeg_crop.c, built at install with the system's
libjpeg-turbo) splits each decoded scanline into the crop's planes while it
is in the core's cache and writes them straight into the batch's message:
no full-size image, no second pass. It decodes as simplejpeg and Pillow do
(the accurate integer IDCT, fancy upsampling; warnings are failures), and
only what jpeg_decode proves identical reaches it.

The library is optional: where it was not built (no C compiler or libjpeg
headers at install) or it fails the check made when it is loaded (the
crops of a few JPEGs of every kind must equal the Python path's, byte for
byte: a libjpeg that decodes otherwise is never used), ``available()`` is
False and the Python path runs as before.
"""

from __future__ import annotations

import ctypes
import functools
import logging
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

LIBRARY = Path(__file__).with_name("_jpeg_crop.so")
DONE = 0  # jpeg_crop.c's CROP_DONE; anything else: decode it another way


@functools.cache
def _library() -> ctypes.CDLL | None:
    if not LIBRARY.exists():
        log.info("the native JPEG crop is not built (%s): JPEGs decode through simplejpeg", LIBRARY.name)
        return None
    try:
        library = ctypes.CDLL(str(LIBRARY))
    except OSError as exc:
        log.warning("the native JPEG crop does not load (%s): JPEGs decode through simplejpeg", exc)
        return None
    crop = library.shardstream_jpeg_crop
    crop.restype = ctypes.c_int
    crop.argtypes = [ctypes.c_char_p, ctypes.c_ulong, *[ctypes.c_int] * 8, ctypes.c_void_p, ctypes.c_void_p]
    library.shardstream_jpeg_crop_version.restype = ctypes.c_int
    return library


@functools.cache
def available() -> bool:
    """Whether the native crop is built, loads, and gives the Python path's bytes (checked once)."""
    from shardstream.service.transforms.jpeg_crop_check import mismatch

    if _library() is None:
        return False
    failed = mismatch()
    if failed:
        log.warning("the native JPEG crop (libjpeg-turbo %s) is not used: %s", libjpeg_version(), failed)
        return False
    return True


def libjpeg_version() -> str:
    """The libjpeg-turbo the native crop was built with ("" when it is not built)."""
    library = _library()
    if library is None:
        return ""
    number = int(library.shardstream_jpeg_crop_version())
    return f"{number // 1_000_000}.{number // 1000 % 1000}.{number % 1000}"


def crop_into(data: bytes, channels: int, image_width: int, image_height: int, top: int, left: int,
              flip: bool, out: np.ndarray, whole: np.ndarray | None = None) -> bool:
    """Write the crop at (top, left) of the JPEG `data` (`image_width` x `image_height`), mirrored
    when `flip`, into `out` (uint8 [channels, height, width], C-contiguous), and the whole image
    into `whole` when it is given (uint8 [image_height, image_width, channels]: what the node's
    cache keeps) in the same pass. False: not written (damaged, or not what its header said);
    decode it another way."""
    library = _library()
    assert library is not None, "crop_into called where available() is False"
    if out.dtype != np.uint8 or out.ndim != 3 or out.shape[0] != channels or not out.flags.c_contiguous:
        raise ValueError(f"out must be C-contiguous uint8 [{channels}, height, width], got {out.dtype} "
                         f"{out.shape}")
    if whole is not None and (whole.dtype != np.uint8 or whole.shape != (image_height, image_width, channels)
                              or not whole.flags.c_contiguous):
        raise ValueError(f"whole must be C-contiguous uint8 [{image_height}, {image_width}, {channels}], "
                         f"got {whole.dtype} {whole.shape}")
    _, height, width = out.shape
    status = library.shardstream_jpeg_crop(
        data, len(data), channels, image_width, image_height, top, left, height, width, int(flip),
        out.__array_interface__["data"][0], None if whole is None else whole.__array_interface__["data"][0])
    return int(status) == DONE


__all__ = ["LIBRARY", "available", "crop_into", "libjpeg_version"]
