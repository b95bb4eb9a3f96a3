"""The built-in image transform: prepare = decode (+ resize), augment = crop + flip.

Output: the image column as uint8 [B, C, H, W]; every other selected column
passes through: numbers as tensors (labels), strings as lists (captions). JPEGs decode with
libjpeg-turbo straight into numpy where that gives Pillow's pixels (jpeg_decode.py); everything
else (PNG, CMYK, a reduced-size JPEG decode, a damaged file) decodes in Pillow's C code.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
from PIL import Image

from shardstream.proto.errors import InvalidJobSpec
from shardstream.service.transforms import jpeg_crop, jpeg_decode
from shardstream.service.transforms.base import Sample, check_tensor_column

MODES = ("random_crop", "center_crop", "resize")
NATIVE_HEADERS = 4096  # JPEG headers whose native-crop answer a transform remembers


class ImageTransform:
    def __init__(self, column: str = "image", size: int | list[int] = 224, mode: str = "random_crop",
                 flip: bool = True, resize_short: int | None = None, channels: int = 3) -> None:
        if isinstance(size, int):
            size = [size, size]
        if len(size) != 2 or not all(isinstance(v, int) for v in size):
            raise InvalidJobSpec(f"image size must be an int or [height, width], got {size!r}")
        height, width = size
        if height <= 0 or width <= 0:
            raise InvalidJobSpec(f"image size must be positive, got {size!r}")
        if mode not in MODES:
            raise InvalidJobSpec(f"image mode must be one of {MODES}, got {mode!r}")
        if channels not in (1, 3):
            raise InvalidJobSpec(f"image channels must be 1 or 3, got {channels!r}")
        if resize_short is not None and resize_short <= 0:
            raise InvalidJobSpec(f"resize_short must be positive, got {resize_short!r}")
        self.column, self.height, self.width = column, int(height), int(width)
        self.mode, self.flip, self.resize_short = mode, bool(flip), resize_short
        self.channels = channels
        self.pil_mode = "RGB" if channels == 3 else "L"
        self._native_headers: dict[tuple[tuple[int, int, str, str], int | None], bool] = {}

    def check_schema(self, schema: pa.Schema) -> None:
        if self.column not in schema.names:
            raise InvalidJobSpec(f"image column {self.column!r} not in dataset columns {schema.names}")
        kind = schema.field(self.column).type
        if not (pa.types.is_binary(kind) or pa.types.is_large_binary(kind)):
            raise InvalidJobSpec(f"image column {self.column!r} must hold encoded bytes, has {kind}")
        for field in schema:
            if field.name != self.column:
                check_tensor_column(field)

    def prepare(self, row: Sample) -> Sample:
        """Deterministic: decode and resize. Raises on a corrupt image."""
        out: dict[str, Any] = dict(row)
        out[self.column] = self._pixels(row[self.column])
        return out

    def _pixels(self, data: bytes) -> np.ndarray:
        """uint8 [H, W, C]: decoded by libjpeg-turbo straight into numpy when that gives Pillow's
        pixels (jpeg_decode.py), else by Pillow; then fitted and cropped."""
        header = jpeg_decode.jpeg_size(data)
        if header is not None and self._full_size(header[0], header[1]):
            pixels = jpeg_decode.decode(data, self.channels, header)
            if pixels is not None:
                if self.mode != "resize" and self._scale(pixels.shape[1], pixels.shape[0]) == 1.0:
                    return self._center(pixels) if self.mode == "center_crop" else pixels
                return self._shaped(Image.fromarray(pixels[:, :, 0] if self.channels == 1 else pixels))
        with Image.open(io.BytesIO(data)) as encoded:
            if encoded.format == "JPEG":
                # Decode at a reduced DCT scale when the image will be shrunk anyway: several
                # times less work for large photos; never below the size needed next.
                encoded.draft(self.pil_mode, self._needed_size(encoded.width, encoded.height))
            encoded.load()
            img: Image.Image = encoded if encoded.mode == self.pil_mode else encoded.convert(self.pil_mode)
        return self._shaped(img)

    def _shaped(self, img: Image.Image) -> np.ndarray:
        if self.mode == "resize":
            img = img.resize((self.width, self.height), Image.Resampling.BILINEAR)
        else:
            img = self._fit(img)
            if self.mode == "center_crop":
                top = (img.height - self.height) // 2
                left = (img.width - self.width) // 2
                img = img.crop((left, top, left + self.width, top + self.height))
        pixels = np.asarray(img, dtype=np.uint8)
        return pixels if pixels.ndim == 3 else pixels[:, :, None]

    def _center(self, pixels: np.ndarray) -> np.ndarray:
        """The center crop of pixels at least the crop's size (what Image.crop gives)."""
        top = (pixels.shape[0] - self.height) // 2
        left = (pixels.shape[1] - self.width) // 2
        return np.ascontiguousarray(pixels[top : top + self.height, left : left + self.width])

    def _full_size(self, width: int, height: int) -> bool:
        """Whether Pillow's ``draft`` would decode this JPEG at full size (its DCT scale: the
        largest of 8, 4, 2 at most min(width // needed width, height // needed height), else 1)."""
        needed_width, needed_height = self._needed_size(width, height)
        return min(width // needed_width, height // needed_height) < 2

    def augment(self, sample: Sample, rng: np.random.Generator) -> Sample:
        """Random: crop position and horizontal flip, then HWC -> CHW."""
        pixels: np.ndarray = sample[self.column]
        out = dict(sample)
        # A view: collate makes the one copy, into the message.
        out[self.column] = self._crop_chw(pixels, *self._crop_at(rng, pixels.shape[0], pixels.shape[1]))
        return out

    def _crop_at(self, rng: np.random.Generator, height: int, width: int) -> tuple[int, int, bool]:
        """(top, left, flip) of the crop of an image of height x width: what augment draws from
        `rng`, in its order. Prepare left a center crop or a resize at the crop's size (0, 0)."""
        if self.mode == "random_crop":
            top = int(rng.integers(0, height - self.height + 1))
            left = int(rng.integers(0, width - self.width + 1))
        else:
            top, left = (height - self.height) // 2, (width - self.width) // 2
        return top, left, self.flip and rng.random() < 0.5

    def _crop_chw(self, pixels: np.ndarray, top: int, left: int, flip: bool) -> np.ndarray:
        """The crop of HWC `pixels` at (top, left), mirrored when `flip`, as a CHW view."""
        pixels = pixels[top : top + self.height, left : left + self.width]
        return (pixels[:, ::-1] if flip else pixels).transpose(2, 0, 1)

    def augment_into(self, row: Sample, rng: np.random.Generator, out: Mapping[str, np.ndarray],
                     keep: bool = False) -> tuple[Sample, Sample | None] | None:
        """``augment(prepare(row), rng)`` with the image written straight into ``out[column]`` (its
        row of the batch's message) by the native crop (jpeg_crop.py): the same pixels and the same
        draws from `rng`; with `keep`, also ``prepare(row)``, from the same decode, for the node's
        cache (else None). None, with nothing drawn, where that path does not apply: another kind
        of image, a resize, the native crop not built, or a subclass with its own prepare or augment."""
        data = row.get(self.column)
        target = out.get(self.column)
        if (self.mode == "resize" or not isinstance(data, bytes) or target is None
                or target.shape != (self.channels, self.height, self.width) or target.dtype != np.uint8
                or type(self).prepare is not ImageTransform.prepare
                or type(self).augment is not ImageTransform.augment or not jpeg_crop.available()):
            return None
        header = jpeg_decode.jpeg_size(data)
        if header is None or not self._crops_natively(header):
            return None
        width, height = header[0], header[1]
        top, left, flip = self._crop_at(rng, height, width)
        whole = np.empty((height, width, self.channels), np.uint8) if keep else None
        if jpeg_crop.crop_into(data, self.channels, width, height, top, left, flip, target, whole):
            prepared = whole if whole is None or self.mode == "random_crop" else self._center(whole)
        else:  # damaged, or not what its header said: Pillow decodes it, or raises what it always raised
            prepared = self._pixels(data)  # a center crop is made already
            target[...] = self._crop_chw(prepared, *((top, left) if self.mode == "random_crop" else (0, 0)), flip)
        sample = dict(row)
        sample[self.column] = target
        if not keep:
            return sample, None
        whole_sample = dict(row)
        whole_sample[self.column] = prepared
        return sample, whole_sample

    def batch_shape(self) -> tuple[int, int, int] | None:
        """(channels, height, width) of the image a batch made by `crop_batch` holds per sample; None
        where `crop_batch` does not apply (see augment_into)."""
        if (self.mode == "resize" or type(self).prepare is not ImageTransform.prepare
                or type(self).augment is not ImageTransform.augment or not jpeg_crop.available()):
            return None
        return self.channels, self.height, self.width

    def crop_batch(self, pointers: np.ndarray, sizes: np.ndarray, take: np.ndarray, words: np.ndarray,
                   out: np.ndarray, keep: np.ndarray) -> tuple[np.ndarray, dict[int, np.ndarray]]:
        """``augment(prepare(row), rng)``'s image for each JPEG i of a batch (at `pointers[i]`, of
        `sizes[i]` bytes) whose `take[i]` is set, written into `out[i]` by one native call, with the
        draws of the generator ``sample_rng`` gives it (PCG64 seeded with `words[i]`, sample_seeds.py);
        and where `keep[i]` is set, also its ``prepare`` image from the same decode. Returns (bool
        [n]: written; position -> prepared image). The others (not taken, another kind of image,
        damaged) are left for the usual path, nothing drawn: `batch_shape` says when to call this."""
        found = jpeg_crop.headers(pointers, sizes)
        take = np.asarray(take, dtype=bool) & (found[:, 2] > 0)
        headers = found[take]
        if len(headers) and (headers == headers[0]).all():  # a batch of one size and kind: no sort
            take[take] = self._crops_natively((int(headers[0, 0]), int(headers[0, 1]), *jpeg_crop.KINDS[int(headers[0, 2])]))
        elif len(headers):
            kinds, which = np.unique(headers, axis=0, return_inverse=True)
            natively = np.array([self._crops_natively((int(w), int(h), *jpeg_crop.KINDS[int(kind)]))
                                 for w, h, kind in kinds.tolist()])
            take[take] = natively[np.ravel(which)]
        wholes: list[np.ndarray | None] = [
            np.empty((found[i, 1], found[i, 0], self.channels), np.uint8) if take[i] and keep[i] else None
            for i in range(len(take))]
        done = jpeg_crop.crop_batch(pointers, sizes, take, found, words, self.mode == "random_crop", self.flip,
                                    out, wholes)
        prepared = {i: whole if self.mode == "random_crop" else self._center(whole)
                    for i, whole in enumerate(wholes) if whole is not None and done[i]}
        return done, prepared

    def crop_prepared_batch(self, prepared: dict[int, np.ndarray], words: np.ndarray, out: np.ndarray) -> list[int]:
        """``augment``'s image for each prepared image (position -> ``prepare``'s pixels, from the
        node's cache) written into `out[position]` by one native call, with the draws of the
        generator seeded with `words[position]`; the positions written (the others, of another
        shape or dtype, are left to ``augment``)."""
        taken = {position: pixels for position, pixels in prepared.items()
                 if isinstance(pixels, np.ndarray) and pixels.dtype == np.uint8 and pixels.ndim == 3
                 and pixels.shape[2] == self.channels and pixels.flags.c_contiguous
                 and pixels.shape[0] >= self.height and pixels.shape[1] >= self.width}
        if taken:
            jpeg_crop.crop_pixels_batch(taken, words, self.mode == "random_crop", self.flip, out)
        return list(taken)

    def _crops_natively(self, header: tuple[int, int, str, str]) -> bool:
        """Whether a JPEG with this header is one the native crop takes: decoded as Pillow decodes
        it, at full size, not resized. Remembered per header (a dataset has few image sizes)."""
        key = (header, Image.MAX_IMAGE_PIXELS)
        applies = self._native_headers.get(key)
        if applies is None:
            width, height = header[0], header[1]
            applies = (jpeg_decode.decodes_like_pillow(header, self.channels) and self._full_size(width, height)
                       and self._scale(width, height) == 1.0)
            if len(self._native_headers) < NATIVE_HEADERS:
                self._native_headers[key] = applies
        return applies

    def _needed_size(self, width: int, height: int) -> tuple[int, int]:
        """The smallest decoded size the rest of prepare() can work from without upscaling."""
        if self.mode == "resize":
            return self.width, self.height
        scale = max(self._scale(width, height), 1e-9)
        return max(self.width, math.ceil(width * scale)), max(self.height, math.ceil(height * scale))

    def _scale(self, width: int, height: int) -> float:
        scale = 1.0 if self.resize_short is None else self.resize_short / min(width, height)
        return max(scale, self.height / height, self.width / width)

    def _fit(self, img: Image.Image) -> Image.Image:
        """Resize so the short side is resize_short, and never smaller than the crop."""
        scale = self._scale(img.width, img.height)
        if scale != 1.0:
            size = (max(self.width, round(img.width * scale)), max(self.height, round(img.height * scale)))
            img = img.resize(size, Image.Resampling.BILINEAR)
        return img


__all__ = ["ImageTransform"]
