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
    library.shardstream_jpeg_headers.restype = None
    library.shardstream_jpeg_headers.argtypes = [ctypes.c_int, *[ctypes.c_void_p] * 3]
    library.shardstream_crop_draws.restype = None
    library.shardstream_crop_draws.argtypes = [ctypes.c_void_p, *[ctypes.c_int] * 6, ctypes.c_void_p]
    batch = library.shardstream_jpeg_crop_batch
    batch.restype = ctypes.c_int
    batch.argtypes = [ctypes.c_int, *[ctypes.c_void_p] * 5, *[ctypes.c_int] * 5, *[ctypes.c_void_p] * 3]
    pixels = library.shardstream_crop_pixels_batch
    pixels.restype = None
    pixels.argtypes = [ctypes.c_int, *[ctypes.c_void_p] * 4, *[ctypes.c_int] * 5, ctypes.c_void_p]
    library.shardstream_seed_words.restype = None
    library.shardstream_seed_words.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int,
                                               ctypes.c_void_p]
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


# shardstream_jpeg_header's kinds (jpeg_crop.h) as simplejpeg's header read names them:
# (colour space, subsampling); KIND_OTHER (0) is none of these.
KINDS = {1: ("YCbCr", "444"), 2: ("YCbCr", "422"), 3: ("YCbCr", "420"), 4: ("YCbCr", "440"),
         5: ("YCbCr", "411"), 6: ("Gray", "Gray")}


def _address(array: np.ndarray) -> int:
    return int(array.__array_interface__["data"][0])


def headers(pointers: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """int32 [n, 3]: (width, height, kind) of the JPEGs at `pointers` (uint64 addresses) of `sizes`
    bytes; kind 0 for any the native crop does not take (KINDS names the others). The memory they
    point to must stay alive and unchanged during the call."""
    library = _library()
    assert library is not None, "headers called where available() is False"
    pointers, sizes = _addresses(pointers, sizes)
    out = np.zeros((len(pointers), 3), np.int32)
    library.shardstream_jpeg_headers(len(pointers), _address(pointers), _address(sizes), _address(out))
    return out


def crop_draws(words: np.ndarray, image_height: int, image_width: int, height: int, width: int,
               random_crop: bool, flip: bool) -> tuple[int, int, bool]:
    """(top, left, flip) as the native batch draws them from the PCG64 seeded with `words` (uint64
    [4], SeedSequence's): what ImageTransform._crop_at draws from that generator."""
    library = _library()
    assert library is not None, "crop_draws called where available() is False"
    words = np.ascontiguousarray(words, dtype=np.uint64)
    out = np.zeros(3, np.int32)
    library.shardstream_crop_draws(_address(words), image_height, image_width, height, width, int(random_crop),
                                   int(flip), _address(out))
    return int(out[0]), int(out[1]), bool(out[2])


def crop_batch(pointers: np.ndarray, sizes: np.ndarray, take: np.ndarray, found: np.ndarray, words: np.ndarray,
               random_crop: bool, flip: bool, out: np.ndarray, wholes: list[np.ndarray | None]) -> np.ndarray:
    """Crop each JPEG i whose `take[i]` is set (of the size `found[i]` gives, from `headers`) with the
    crop and flip ImageTransform._crop_at draws from the PCG64 seeded with `words[i]` (uint64
    [n, 4]), into `out[i]` (uint8 [n, channels, height, width], C-contiguous), and the whole image
    into `wholes[i]` where it is not None (uint8 [image height, image width, channels]). Returns
    bool [n]: written (the others: not taken, damaged, or not what the header said)."""
    library = _library()
    assert library is not None, "crop_batch called where available() is False"
    count = len(pointers)
    pointers, sizes = _addresses(pointers, sizes)
    if out.dtype != np.uint8 or out.ndim != 4 or len(out) != count or not out.flags.c_contiguous:
        raise ValueError(f"out must be C-contiguous uint8 [{count}, channels, height, width], got {out.dtype} "
                         f"{out.shape}")
    take = np.ascontiguousarray(take, dtype=np.uint8)
    found = np.ascontiguousarray(found, dtype=np.int32)
    words = np.ascontiguousarray(words, dtype=np.uint64)
    if take.shape != (count,) or found.shape != (count, 3) or words.shape != (count, 4) or len(wholes) != count:
        raise ValueError("take, found, words and wholes must have one entry per JPEG")
    _, channels, height, width = out.shape
    whole_pointers = np.zeros(count, np.uint64)
    for i, whole in enumerate(wholes):
        if whole is not None:
            wanted = (int(found[i, 1]), int(found[i, 0]), channels)
            if whole.dtype != np.uint8 or whole.shape != wanted or not whole.flags.c_contiguous:
                raise ValueError(f"wholes[{i}] must be C-contiguous uint8 {list(wanted)}, got {whole.dtype} "
                                 f"{whole.shape}")
            whole_pointers[i] = _address(whole)
    status = np.ones(count, np.int32)
    library.shardstream_jpeg_crop_batch(
        count, _address(pointers), _address(sizes), _address(take), _address(found), _address(words), channels,
        height, width, int(random_crop), int(flip), _address(out), _address(whole_pointers), _address(status))
    return status == DONE


def crop_pixels_batch(images: dict[int, np.ndarray], words: np.ndarray, random_crop: bool, flip: bool,
                      out: np.ndarray) -> None:
    """The crop and flip of each decoded image (position -> uint8 [height, width, channels],
    C-contiguous, at least as large as the crop) that crop_batch would draw from `words[position]`,
    into `out[position]` (uint8 [n, channels, height, width], C-contiguous), in one call."""
    library = _library()
    assert library is not None, "crop_pixels_batch called where available() is False"
    count, channels, height, width = out.shape
    if out.dtype != np.uint8 or not out.flags.c_contiguous or words.shape != (count, 4):
        raise ValueError(f"out must be C-contiguous uint8 [n, channels, height, width] with words [n, 4], got "
                         f"{out.dtype} {out.shape} and {words.shape}")
    pointers, dims, take = np.zeros(count, np.uint64), np.zeros((count, 2), np.int32), np.zeros(count, np.uint8)
    for position, image in images.items():
        if (image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != channels or not image.flags.c_contiguous
                or image.shape[0] < height or image.shape[1] < width):
            raise ValueError(f"image {position} must be C-contiguous uint8 [height >= {height}, width >= {width}, "
                             f"{channels}], got {image.dtype} {image.shape}")
        pointers[position], dims[position], take[position] = _address(image), (image.shape[1], image.shape[0]), 1
    words = np.ascontiguousarray(words, dtype=np.uint64)
    library.shardstream_crop_pixels_batch(count, _address(pointers), _address(dims), _address(take), _address(words),
                                          channels, height, width, int(random_crop), int(flip), _address(out))


def seed_words(prefix: list[int], last: np.ndarray) -> np.ndarray | None:
    """uint64 [n, 4]: SeedSequence(prefix + [last[k]]).generate_state(4, uint64) for each of the n
    uint32 words of `last` (`prefix`: uint32 words), in one call; None where the library is not
    built (sample_seeds.pcg64_words computes the same with numpy)."""
    library = _library()
    if library is None:
        return None
    words = np.ascontiguousarray(prefix, dtype=np.uint32)
    last = np.ascontiguousarray(last, dtype=np.uint32)
    out = np.empty((len(last), 4), np.uint64)
    library.shardstream_seed_words(_address(words), len(words), _address(last), len(last), _address(out))
    return out


def _addresses(pointers: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    pointers = np.ascontiguousarray(pointers, dtype=np.uint64)
    sizes = np.ascontiguousarray(sizes, dtype=np.uint64)
    if pointers.shape != sizes.shape or pointers.ndim != 1:
        raise ValueError(f"pointers and sizes must be two 1-d arrays of one length, got {pointers.shape} and "
                         f"{sizes.shape}")
    return pointers, sizes


__all__ = ["KINDS", "LIBRARY", "available", "crop_batch", "crop_draws", "crop_into", "crop_pixels_batch", "headers",
           "libjpeg_version", "seed_words"]
