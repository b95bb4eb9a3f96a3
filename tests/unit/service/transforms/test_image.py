"""The built-in image transform: decode, fit, crop/resize, flip, CHW uint8, schema checks."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from PIL import Image

from shardstream.proto.errors import InvalidJobSpec
from shardstream.service.transforms.base import collate
from shardstream.service.transforms.image import ImageTransform
from tests.datasets import encode_image


def _run(transform: ImageTransform, data: bytes, rng_seed: int = 0) -> np.ndarray:
    sample = transform.augment(transform.prepare({"image": data, "label": 1}),
                               np.random.default_rng(rng_seed))
    assert sample["label"] == 1  # other columns pass through
    out: np.ndarray = sample["image"]
    return out


def _encode(pixels: np.ndarray, fmt: str) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format=fmt)  # 2-D -> L, 4 channels -> RGBA
    return buf.getvalue()


GRAY = _encode(np.arange(30 * 20, dtype=np.uint8).reshape(30, 20), "PNG")
RGBA = _encode(np.full((25, 35, 4), 200, np.uint8), "PNG")


@pytest.mark.parametrize("data", [
    encode_image(40, 32, 1, "JPEG"),
    encode_image(40, 32, 2, "PNG"),
    GRAY,
    RGBA,
    encode_image(5, 7, 3, "PNG"),  # smaller than the crop: must be upscaled
], ids=["jpeg", "png", "gray", "rgba", "tiny"])
@pytest.mark.parametrize("mode", ["random_crop", "center_crop", "resize"])
@pytest.mark.parametrize(("size", "shape"), [(16, (16, 16)), ([12, 18], (12, 18))])
def test_output_is_uint8_chw_of_the_requested_size(data: bytes, mode: str, size: Any,
                                                   shape: tuple[int, int]) -> None:
    transform = ImageTransform(size=size, mode=mode)
    out = _run(transform, data)
    assert out.dtype == np.uint8
    assert out.shape == (3, *shape)
    batch = collate([{"image": out, "label": 1}, {"image": out, "label": 2}])
    assert batch["image"].shape == (2, 3, *shape) and batch["image"].flags.c_contiguous
    assert np.array_equal(batch["image"][1], out) and batch["label"].tolist() == [1, 2]


def test_grayscale_output_has_one_channel() -> None:
    out = _run(ImageTransform(size=10, channels=1, mode="center_crop", flip=False),
               encode_image(40, 32, 1, "PNG"))
    assert out.shape == (1, 10, 10)


def test_grayscale_input_is_replicated_to_rgb() -> None:
    out = _run(ImageTransform(size=8, mode="center_crop", flip=False), GRAY)
    np.testing.assert_array_equal(out[0], out[1])
    np.testing.assert_array_equal(out[0], out[2])


def test_center_crop_without_flip_takes_the_middle_exactly() -> None:
    pixels = np.random.default_rng(0).integers(0, 256, size=(20, 30, 3), dtype=np.uint8)
    out = _run(ImageTransform(size=[10, 12], mode="center_crop", flip=False), _encode(pixels, "PNG"))
    np.testing.assert_array_equal(out, pixels[5:15, 9:21].transpose(2, 0, 1))


def test_center_crop_without_flip_ignores_the_rng() -> None:
    transform = ImageTransform(size=12, mode="center_crop", flip=False)
    data = encode_image(40, 32, 4, "PNG")
    np.testing.assert_array_equal(_run(transform, data, 1), _run(transform, data, 2))


def test_random_crop_is_a_function_of_the_rng() -> None:
    transform = ImageTransform(size=12, mode="random_crop")
    data = encode_image(40, 32, 5, "PNG")
    np.testing.assert_array_equal(_run(transform, data, 7), _run(transform, data, 7))
    crops = {_run(transform, data, seed).tobytes() for seed in range(20)}
    assert len(crops) > 1


def test_flip_mirrors_horizontally() -> None:
    pixels = np.random.default_rng(1).integers(0, 256, size=(8, 8, 3), dtype=np.uint8)
    transform = ImageTransform(size=8, mode="resize", flip=True)
    data = _encode(pixels, "PNG")
    outs = {_run(transform, data, seed).tobytes() for seed in range(20)}
    chw = pixels.transpose(2, 0, 1)
    assert outs == {chw.tobytes(), np.ascontiguousarray(chw[:, :, ::-1]).tobytes()}


def test_resize_short_scales_the_short_side_before_cropping() -> None:
    transform = ImageTransform(size=8, mode="random_crop", resize_short=20)
    sample = transform.prepare({"image": encode_image(40, 32, 1, "JPEG")})
    assert sample["image"].shape == (20, 25, 3)  # HWC before augment


def test_corrupt_bytes_raise() -> None:
    with pytest.raises(Exception):  # noqa: B017 - any decode error; batching maps it to CorruptSample
        ImageTransform(size=8).prepare({"image": b"not an image"})


@pytest.mark.parametrize("kwargs", [
    {"size": 0}, {"size": [4, -1]}, {"mode": "zoom"}, {"channels": 4}, {"resize_short": 0},
])
def test_constructor_refuses_bad_arguments(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidJobSpec):
        ImageTransform(**kwargs)


def test_check_schema_accepts_binary_and_numeric_columns() -> None:
    ImageTransform().check_schema(pa.schema([("image", pa.binary()), ("label", pa.int64())]))
    ImageTransform(column="jpg").check_schema(pa.schema([("jpg", pa.large_binary())]))


@pytest.mark.parametrize(("schema", "needle"), [
    (pa.schema([("img", pa.binary())]), "'image' not in"),
    (pa.schema([("image", pa.int64())]), "encoded bytes"),
    (pa.schema([("image", pa.string())]), "encoded bytes"),
    (pa.schema([("image", pa.binary()), ("tags", pa.binary())]), "tags"),
])
def test_check_schema_errors(schema: pa.Schema, needle: str) -> None:
    with pytest.raises(InvalidJobSpec, match=needle):
        ImageTransform().check_schema(schema)


@pytest.mark.parametrize("mode", ["random_crop", "center_crop", "resize"])
def test_large_jpeg_decoded_at_reduced_scale_keeps_the_output_contract(mode: str) -> None:
    """resize_short far below the photo's size lets JPEG decode at 1/2..1/8 scale (draft)."""
    transform = ImageTransform(size=32, resize_short=40, mode=mode)
    data = encode_image(400, 300, 7, "JPEG")
    first, again = _run(transform, data), _run(transform, data)
    assert first.shape == (3, 32, 32) and first.dtype == np.uint8
    assert np.array_equal(first, again)
    needed = transform._needed_size(400, 300)
    assert needed[0] < 400 and needed[1] < 300  # decoding may shrink the photo
    assert min(needed) >= 32  # but never below what the crop needs
