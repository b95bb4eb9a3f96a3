"""The image transform's JPEG decoder choice: libjpeg-turbo through simplejpeg gives Pillow's pixels
byte for byte wherever it is used, and everything else is left to Pillow, errors included."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from PIL import Image

from bench.workload import encode_jpeg, synthetic_image
from shardstream.service.transforms import jpeg_decode
from shardstream.service.transforms.image import ImageTransform
from tests.jpeg_samples import JPEG_KINDS, cmyk_jpeg, pillow_prepare, png

TRANSFORMS = {
    "random crop": ImageTransform(size=112),
    "center crop": ImageTransform(size=[100, 120], mode="center_crop"),
    "resize short side": ImageTransform(size=96, resize_short=128),
    "resize": ImageTransform(size=[64, 80], mode="resize"),
    "one channel": ImageTransform(size=112, channels=1),
    "one channel, center crop": ImageTransform(size=96, channels=1, mode="center_crop"),
}


@pytest.mark.parametrize("data", JPEG_KINDS.values(), ids=JPEG_KINDS.keys())
@pytest.mark.parametrize("channels", [3, 1])
def test_simplejpeg_decodes_it_and_gives_pillows_pixels(data: bytes, channels: int) -> None:
    transform = ImageTransform(size=64, channels=channels)
    header = jpeg_decode.jpeg_size(data)
    assert header is not None
    pixels = jpeg_decode.decode(data, channels, header)
    assert pixels is not None, "this JPEG should take the simplejpeg path"
    expected = pillow_prepare(transform, data)
    assert pixels.dtype == np.uint8 and pixels.shape == expected.shape
    assert np.array_equal(pixels, expected)


@pytest.mark.parametrize("transform", TRANSFORMS.values(), ids=TRANSFORMS.keys())
@pytest.mark.parametrize("data", [JPEG_KINDS["odd size 4:2:0"], JPEG_KINDS["grayscale"]],
                         ids=["color", "gray"])
def test_prepare_equals_the_pillow_path_in_every_mode(transform: ImageTransform, data: bytes) -> None:
    assert np.array_equal(transform.prepare({"image": data})["image"], pillow_prepare(transform, data))


def test_the_workloads_images_are_identical() -> None:
    transform = ImageTransform(size=224)
    for index in range(20):
        data = encode_jpeg(synthetic_image(0, index, 256), 90)
        assert jpeg_decode.decode(data, 3, jpeg_decode.jpeg_size(data)) is not None  # type: ignore[arg-type]
        assert np.array_equal(transform.prepare({"image": data})["image"], pillow_prepare(transform, data))


def test_cmyk_is_left_to_pillow() -> None:
    data = cmyk_jpeg()
    header = jpeg_decode.jpeg_size(data)
    assert header is not None and header[2] == "CMYK"
    assert jpeg_decode.decode(data, 3, header) is None
    transform = ImageTransform(size=112)
    assert np.array_equal(transform.prepare({"image": data})["image"], pillow_prepare(transform, data))


def test_png_is_left_to_pillow() -> None:
    data = png()
    assert jpeg_decode.jpeg_size(data) is None
    transform = ImageTransform(size=112)
    assert np.array_equal(transform.prepare({"image": data})["image"], pillow_prepare(transform, data))


def test_a_decode_pillow_would_reduce_is_left_to_pillow(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 256-pixel image cropped to 100: Pillow decodes it at half size (draft), which simplejpeg must not
    be asked to imitate."""
    data = JPEG_KINDS["workload q90"]
    transform = ImageTransform(size=100, mode="resize")
    assert not transform._full_size(256, 256) and ImageTransform(size=224)._full_size(256, 256)
    monkeypatch.setattr(jpeg_decode, "decode", _refuse)
    assert np.array_equal(transform.prepare({"image": data})["image"], pillow_prepare(transform, data))


def _refuse(*args: Any) -> None:
    raise AssertionError("simplejpeg was asked to decode")


def test_an_image_over_pillows_pixel_limit_is_left_to_pillow(monkeypatch: pytest.MonkeyPatch) -> None:
    data = JPEG_KINDS["workload q90"]
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 256 * 255)
    assert jpeg_decode.decode(data, 3, jpeg_decode.jpeg_size(data)) is None  # type: ignore[arg-type]
    with pytest.warns(Image.DecompressionBombWarning):  # Pillow's own warning, as before
        ImageTransform(size=112).prepare({"image": data})


@pytest.mark.parametrize("cut", [0.5, 0.9])
def test_a_truncated_jpeg_raises_pillows_error(cut: float, monkeypatch: pytest.MonkeyPatch) -> None:
    data = JPEG_KINDS["progressive 4:2:0"]
    data = data[: int(len(data) * cut)]
    transform = ImageTransform(size=112)
    with pytest.raises(Exception) as fast:
        transform.prepare({"image": data})
    monkeypatch.setattr(jpeg_decode, "simplejpeg", None)  # the Pillow path alone
    with pytest.raises(Exception) as pillow:
        transform.prepare({"image": data})
    assert type(fast.value) is type(pillow.value) is OSError
    assert str(fast.value) == str(pillow.value)


def test_without_simplejpeg_pillow_decodes_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jpeg_decode, "simplejpeg", None)
    data = JPEG_KINDS["workload q90"]
    assert jpeg_decode.jpeg_size(data) is None
    transform = ImageTransform(size=112)
    assert np.array_equal(transform.prepare({"image": data})["image"], pillow_prepare(transform, data))
