"""The native JPEG crop: built here, its crops byte for byte Pillow's crops of Pillow's decode, the same
draws from a sample's generator as prepare + augment, damaged files failing as they fail in Pillow,
and a library that decodes otherwise never used."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

from shardstream.service.transforms import jpeg_crop, jpeg_crop_check, jpeg_decode
from shardstream.service.transforms.image import ImageTransform
from shardstream.service.transforms.sample_seeds import sample_rngs, seed_words
from tests.jpeg_samples import JPEG_KINDS, cmyk_jpeg, pillow_prepare, png


@pytest.fixture
def fresh_check() -> Any:
    """`available()` decided again (a test changes what it sees), and again after the test."""
    jpeg_crop.available.cache_clear()
    jpeg_crop._library.cache_clear()
    yield
    jpeg_crop.available.cache_clear()
    jpeg_crop._library.cache_clear()


def test_the_native_crop_is_built_and_passes_its_check() -> None:
    assert jpeg_crop.LIBRARY.exists(), "make setup builds it (service/build_native.py)"
    assert jpeg_crop.available()
    assert jpeg_crop.libjpeg_version().count(".") == 2
    assert jpeg_crop_check.mismatch() == ""


def _pillow_crop(data: bytes, channels: int, top: int, left: int, height: int, width: int,
                 flip: bool) -> np.ndarray:
    full = pillow_prepare(ImageTransform(size=8, channels=channels), data)  # Pillow alone, full size
    crop = full[top : top + height, left : left + width]
    return (crop[:, ::-1] if flip else crop).transpose(2, 0, 1)


@pytest.mark.parametrize("data", JPEG_KINDS.values(), ids=JPEG_KINDS.keys())
@pytest.mark.parametrize("channels", [3, 1])
def test_every_crop_is_pillows(data: bytes, channels: int) -> None:
    """Crops at the corners, the whole image, one pixel, and random ones, flipped or not: the
    decoded region is narrowed to the crop and the rows around it skipped, which must not change a
    pixel inside it."""
    width, height = jpeg_decode.jpeg_size(data)[:2]  # type: ignore[index]
    rng = np.random.default_rng(channels)
    crops = [(0, 0, height, width), (0, 0, 1, 1), (height - 1, width - 1, 1, 1),
             (height - 17, width - 33, 17, 33), (3, 5, height - 3, width - 5)]
    for _ in range(40):
        crop_height, crop_width = int(rng.integers(1, height + 1)), int(rng.integers(1, width + 1))
        crops.append((int(rng.integers(0, height - crop_height + 1)), int(rng.integers(0, width - crop_width + 1)),
                      crop_height, crop_width))
    for number, (top, left, crop_height, crop_width) in enumerate(crops):
        flip = number % 2 == 1
        out = np.empty((channels, crop_height, crop_width), np.uint8)
        assert jpeg_crop.crop_into(data, channels, width, height, top, left, flip, out)
        expected = _pillow_crop(data, channels, top, left, crop_height, crop_width, flip)
        assert np.array_equal(out, expected), (top, left, crop_height, crop_width, flip)


@pytest.mark.parametrize("channels", [3, 1])
def test_rows_wider_than_the_mirrored_rows_on_the_stack_are_pillows_too(channels: int) -> None:
    """A mirrored row of up to 2,048 pixels is split through planes on the stack (jpeg_crop.c,
    FLIP_ROW); a wider one pixel by pixel. Both give Pillow's crop, and so does a prepared image's."""
    import io

    from PIL import Image

    pixels = np.random.default_rng(7).integers(0, 256, (16, 2100, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG", quality=90)
    data = buffer.getvalue()
    for top, left, crop_height, crop_width in [(0, 0, 16, 2100), (3, 1, 9, 2049), (0, 52, 16, 2048), (2, 7, 5, 2047)]:
        for flip in (False, True):
            out = np.empty((channels, crop_height, crop_width), np.uint8)
            assert jpeg_crop.crop_into(data, channels, 2100, 16, top, left, flip, out)
            expected = _pillow_crop(data, channels, top, left, crop_height, crop_width, flip)
            assert np.array_equal(out, expected), (top, left, crop_height, crop_width, flip)
    if channels == 3:  # a prepared image's center crop, mirrored where its draw says: numpy's
        decoded = pillow_prepare(ImageTransform(size=8), data)
        words = seed_words(0, 0, list(range(8)))
        for width in (2048, 2049, 2100):
            out = np.empty((8, 3, 16, width), np.uint8)
            jpeg_crop.crop_pixels_batch(dict.fromkeys(range(8), decoded), words, False, True, out)
            left = (2100 - width) // 2
            plain = decoded[:, left:left + width].transpose(2, 0, 1)
            mirrored = decoded[:, left:left + width][:, ::-1].transpose(2, 0, 1)
            flipped = [np.array_equal(crop, mirrored) for crop in out]
            assert all(flipped[i] or np.array_equal(crop, plain) for i, crop in enumerate(out))
            assert any(flipped) and not all(flipped)


def test_the_whole_image_comes_from_the_same_pass() -> None:
    for name in ("workload q90", "odd size 4:1:1", "grayscale progressive"):
        data = JPEG_KINDS[name]
        width, height = jpeg_decode.jpeg_size(data)[:2]  # type: ignore[index]
        for channels in (3, 1):
            out = np.empty((channels, height - 9, width - 20), np.uint8)
            whole = np.empty((height, width, channels), np.uint8)
            assert jpeg_crop.crop_into(data, channels, width, height, 9, 20, True, out, whole)
            full = pillow_prepare(ImageTransform(size=8, channels=channels), data)
            assert np.array_equal(whole, full)
            assert np.array_equal(out, full[9:, 20:][:, ::-1].transpose(2, 0, 1))
    with pytest.raises(ValueError, match="whole must be"):
        jpeg_crop.crop_into(data, 1, width, height, 0, 0, False, out, np.empty((height, width, 3), np.uint8))


def test_what_its_header_does_not_say_is_not_decoded_here() -> None:
    """Another size than the header the caller read, a crop reaching outside the image, CMYK: not
    written (the caller decodes it another way), and nothing written outside `out`."""
    data = JPEG_KINDS["workload q90"]
    guard = np.full((4, 224, 224), 7, np.uint8)  # the row after `out` must stay untouched
    out = guard[:3]
    assert not jpeg_crop.crop_into(data, 3, 255, 256, 0, 0, False, out)
    assert not jpeg_crop.crop_into(data, 3, 256, 256, 33, 0, False, out)
    assert not jpeg_crop.crop_into(data, 3, 256, 256, 0, -1, False, out)
    assert not jpeg_crop.crop_into(cmyk_jpeg(), 3, 256, 256, 0, 0, False, out)
    assert not jpeg_crop.crop_into(png(), 3, 256, 256, 0, 0, False, out)
    assert (guard[3] == 7).all()
    with pytest.raises(ValueError, match="C-contiguous uint8"):
        jpeg_crop.crop_into(data, 3, 256, 256, 0, 0, False, np.empty((224, 224, 3), np.uint8).transpose(2, 0, 1))


TRANSFORMS = {
    "random crop, flip": ImageTransform(size=224),
    "random crop, odd, no flip": ImageTransform(size=[101, 57], flip=False),
    "center crop, flip": ImageTransform(size=[100, 120], mode="center_crop"),
    "one channel": ImageTransform(size=112, channels=1),
}


@pytest.mark.parametrize("transform", TRANSFORMS.values(), ids=TRANSFORMS.keys())
def test_augment_into_is_prepare_then_augment(transform: ImageTransform) -> None:
    """The same pixels in the batch's row, the same label, and the generator left where augment
    leaves it, over many samples' generators; with `keep`, also prepare's sample, from the same
    decode (what the node's cache keeps)."""
    kinds = [data for data in JPEG_KINDS.values()  # those it decodes at full size, uncropped by prepare
             if transform._scale(*jpeg_decode.jpeg_size(data)[:2]) == 1.0]  # type: ignore[index]
    assert len(kinds) >= 3
    rngs, twins = sample_rngs(5, 2, list(range(60))), sample_rngs(5, 2, list(range(60)))
    for number, (rng, twin) in enumerate(zip(rngs, twins, strict=True)):
        row = {"image": kinds[number % len(kinds)], "label": number}
        expected = transform.augment(transform.prepare(dict(row)), twin)
        out = {"image": np.empty((transform.channels, transform.height, transform.width), np.uint8)}
        keep = number % 3 == 0
        made = transform.augment_into(dict(row), rng, out, keep)
        assert made is not None
        sample, prepared = made
        assert sample["image"] is out["image"]
        assert np.array_equal(sample["image"], expected["image"]) and sample["label"] == number
        assert rng.random() == twin.random()
        if keep:
            assert prepared is not None and prepared["label"] == number
            whole = transform.prepare(dict(row))["image"]
            assert prepared["image"].dtype == whole.dtype and np.array_equal(prepared["image"], whole)
        else:
            assert prepared is None


@pytest.mark.parametrize("case", ["png", "cmyk", "resize", "reduced decode", "subclass", "wrong row shape"])
def test_augment_into_declines_without_drawing(case: str) -> None:
    class Jitter(ImageTransform):
        def augment(self, sample: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
            return super().augment(sample, rng)

    data, transform = JPEG_KINDS["workload q90"], ImageTransform(size=112)
    shape = (3, 112, 112)
    if case == "png":
        data = png()
    elif case == "cmyk":
        data = cmyk_jpeg()
    elif case == "resize":
        transform = ImageTransform(size=112, mode="resize")
    elif case == "reduced decode":  # Pillow decodes it at a smaller DCT scale
        transform = ImageTransform(size=64, resize_short=64)
        shape = (3, 64, 64)
    elif case == "subclass":
        transform = Jitter(size=112)
    else:
        shape = (3, 112, 111)
    rng, twin = np.random.default_rng(1), np.random.default_rng(1)
    assert transform.augment_into({"image": data}, rng, {"image": np.empty(shape, np.uint8)}) is None
    assert rng.random() == twin.random()


def _damaged(count: int) -> list[bytes]:
    """JPEGs cut short or with bytes overwritten, at random places (some in the rows a crop skips)."""
    rng = np.random.default_rng(11)
    kinds = [JPEG_KINDS["baseline 4:2:0 q90"], JPEG_KINDS["progressive 4:2:0"], JPEG_KINDS["restart markers"]]
    damaged = []
    for number in range(count):
        data = bytearray(kinds[number % len(kinds)])
        start = int(rng.integers(len(data) // 8, len(data) - 2))
        if number % 3 == 0:
            damaged.append(bytes(data[:start]))
        else:
            data[start : start + 1 + number % 7] = rng.integers(0, 256, 1 + number % 7, dtype=np.uint8).tobytes()
            damaged.append(bytes(data))
    return damaged


def test_a_damaged_jpeg_gives_what_prepare_and_augment_give() -> None:
    """libjpeg's warnings fail the native decode, also where the damage lies in rows the crop
    skips; the sample then goes through Pillow, which raises what it raises or gives what it
    gives, exactly as prepare + augment."""
    transform = ImageTransform(size=112)
    outcomes = set()
    for data in _damaged(60):
        out = {"image": np.empty((3, 112, 112), np.uint8)}
        try:
            expected: Any = transform.augment(transform.prepare({"image": data}), np.random.default_rng(3))
        except Exception as exc:
            with pytest.raises(type(exc)) as raised:
                transform.augment_into({"image": data}, np.random.default_rng(3), out)
            assert str(raised.value) == str(exc)
            outcomes.add("raised")
            continue
        made = transform.augment_into({"image": data}, np.random.default_rng(3), out, keep=True)
        if made is None:  # its header is damaged too: not a JPEG the native path takes
            outcomes.add("declined")
            continue
        assert np.array_equal(made[0]["image"], expected["image"])
        assert made[1] is not None and np.array_equal(made[1]["image"], transform.prepare({"image": data})["image"])
        outcomes.add("decoded")
    assert {"raised", "decoded"} <= outcomes


@pytest.mark.parametrize("top", [0, 100, 144])
def test_a_jpeg_cut_short_below_the_crop_is_not_decoded_here(top: int) -> None:
    data = JPEG_KINDS["baseline 4:2:0 q90"]
    out = np.empty((3, 112, 112), np.uint8)
    for cut in (0.5, 0.9, 0.999):
        assert not jpeg_crop.crop_into(data[: int(len(data) * cut)], 3, 256, 256, top, 0, False, out)
    assert jpeg_crop.crop_into(data, 3, 256, 256, top, 0, False, out)


def test_a_library_that_decodes_otherwise_is_not_used(monkeypatch: pytest.MonkeyPatch, fresh_check: Any,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    real = jpeg_crop.crop_into

    def off_by_one(*args: Any) -> bool:
        done = real(*args)
        args[-1].reshape(-1)[-1] ^= 1
        return done

    monkeypatch.setattr(jpeg_crop, "crop_into", off_by_one)
    assert "other pixels" in jpeg_crop_check.mismatch()
    assert not jpeg_crop.available()
    assert "is not used" in caplog.text
    transform = ImageTransform(size=112)
    out = {"image": np.empty((3, 112, 112), np.uint8)}
    assert transform.augment_into({"image": JPEG_KINDS["workload q90"]}, np.random.default_rng(0), out) is None


def test_without_the_library_the_python_path_runs(monkeypatch: pytest.MonkeyPatch, fresh_check: Any) -> None:
    monkeypatch.setattr(jpeg_crop, "LIBRARY", jpeg_crop.LIBRARY.with_name("not-built.so"))
    assert not jpeg_crop.available() and jpeg_crop.libjpeg_version() == ""
    transform = ImageTransform(size=112)
    out = {"image": np.empty((3, 112, 112), np.uint8)}
    assert transform.augment_into({"image": JPEG_KINDS["workload q90"]}, np.random.default_rng(0), out) is None


def _with_size(data: bytes, width: int, height: int) -> bytes:
    """The JPEG with its frame header (SOF0) claiming another size, its data unchanged."""
    at = data.index(b"\xff\xc0") + 5  # marker, length (2), precision (1): then height, width
    return data[:at] + height.to_bytes(2, "big") + width.to_bytes(2, "big") + data[at + 4 :]


def test_a_header_claiming_a_large_image_over_little_data_fails_fast_and_as_pillow_fails() -> None:
    """An attacker's JPEG: a 6,000 x 6,000 frame over 15 KB of data. The native decode stops at
    the data's end (a warning) instead of making 108 MB of pixels; the sample then fails as it
    fails in Pillow."""
    data = _with_size(JPEG_KINDS["workload q90"], 6000, 6000)
    assert jpeg_decode.jpeg_size(data)[:2] == (6000, 6000)  # type: ignore[index]
    out = np.empty((3, 224, 224), np.uint8)
    started = time.thread_time()
    assert not jpeg_crop.crop_into(data, 3, 6000, 6000, 2000, 3000, False, out)
    assert time.thread_time() - started < 0.5
    transform = ImageTransform(size=224)
    try:
        expected: Any = transform.augment(transform.prepare({"image": data}), np.random.default_rng(1))
    except Exception as exc:
        with pytest.raises(type(exc)):
            transform.augment_into({"image": data}, np.random.default_rng(1), {"image": out})
        return
    made = transform.augment_into({"image": data}, np.random.default_rng(1), {"image": out})
    assert made is not None and np.array_equal(made[0]["image"], expected["image"])


def test_threads_decoding_at_once_get_their_own_crops() -> None:
    """The library keeps no state between calls: decode threads of one actor may call it at once."""
    kinds = list(JPEG_KINDS.values())

    def crops(seed: int) -> list[np.ndarray]:
        rng, made = np.random.default_rng(seed), []
        for data in kinds * 3:
            width, height = jpeg_decode.jpeg_size(data)[:2]  # type: ignore[index]
            out = np.empty((3, height // 2, width // 2), np.uint8)
            top, left = int(rng.integers(0, height // 2)), int(rng.integers(0, width // 2))
            assert jpeg_crop.crop_into(data, 3, width, height, top, left, bool(seed % 2), out)
            made.append(out)
        return made

    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(crops, range(8)))
    assert all(all(np.array_equal(a, b) for a, b in zip(crops(seed), got, strict=True))
               for seed, got in enumerate(together))
