"""A batch of the image transform made in one native call: numpy's draws, and the loop's bytes."""

from __future__ import annotations

import ctypes
import dataclasses
import re
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shardstream.proto.errors import CorruptSample
from shardstream.proto.wire import FrameHeader
from shardstream.proto.writable_bytes import writable_bytes
from shardstream.service.dataset import DatasetIndex
from shardstream.service.formats import index_dataset
from shardstream.service.node.batching import DecodedBatch, decode_batch
from shardstream.service.node.prepared_cache import PreparedCache, prepare_identity
from shardstream.service.node.read_counters import SharedReadCounters
from shardstream.service.node.reader import ShardReader
from shardstream.service.node.row_group_views import NativeViews
from shardstream.service.node.write_budget import WriteBudget
from shardstream.service.node_messages import DecodeJob
from shardstream.service.transforms import build_transform, jpeg_crop, sample_rng
from shardstream.service.transforms.image import ImageTransform
from shardstream.service.transforms.sample_seeds import seed_words
from tests.cache_tiers import chunked_tier
from tests.datasets import memory_reader
from tests.jpeg_samples import JPEG_KINDS, cmyk_jpeg, photo, pillow_jpeg, png
from tests.native_crops import native_crops, one_sample_at_a_time

CROP = [100, 120]  # fits every image of the dataset below but the small one


def _damaged() -> dict[str, bytes]:
    data = JPEG_KINDS["workload q90"]
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0xFF
    return {"cut short": data[: len(data) // 2], "a byte flipped": bytes(flipped), "junk": b"\xff\xd8\xff junk"}


def _images() -> list[bytes]:
    """Every JPEG kind, a CMYK JPEG, a PNG, an image smaller than the crop (resized), damaged ones."""
    return [*JPEG_KINDS.values(), cmyk_jpeg(), png(), pillow_jpeg(photo(90, 60), quality=90)]


DAMAGED_FROM = len(_images())


def _write(directory: Path, images: list[bytes], binary: pa.DataType | None = None) -> DatasetIndex:
    """Two files of row groups of 5 rows; number columns of several types around the image."""
    count = len(images)
    half = count // 2
    index = np.arange(count)
    table = pa.table({
        "label": pa.array(index % 7, pa.int32()),
        "image": pa.array(images, binary or pa.binary()),
        "small": pa.array(index % 200, pa.uint8()),
        "flag": pa.array(index % 3 == 0),
        "weight": pa.array(index / 3, pa.float32()),
        "half": pa.array((index / 7).astype(np.float16), pa.float16()),
    })
    directory.mkdir(parents=True, exist_ok=True)
    pq.write_table(table.slice(0, half), directory / "part-0.parquet", row_group_size=5)
    pq.write_table(table.slice(half), directory / "part-1.parquet", row_group_size=5)
    return index_dataset((str(directory),))


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> DatasetIndex:
    return _write(tmp_path_factory.mktemp("native"), _images() + list(_damaged().values()))


def _job(index: DatasetIndex, args: dict[str, Any], on_corrupt: str = "fail") -> DecodeJob:
    return DecodeJob.alone("j", index, transform="image", transform_args=args, seed=11, on_corrupt=on_corrupt)


def _decode(job: DecodeJob, epoch: int, indices: list[int]) -> DecodedBatch:
    transform = build_transform(job.spec.transform, job.spec.transform_args, ())
    return decode_batch(job, memory_reader(job.index), transform, epoch, np.array(indices, dtype=np.int64),
                        FrameHeader(epoch, 1, 4), writable_bytes)


def _both_ways(monkeypatch: pytest.MonkeyPatch, job: DecodeJob, epoch: int,
               indices: list[int]) -> tuple[DecodedBatch, DecodedBatch, int]:
    """(the batch made in one native call, the loop's, how many samples the native call made)."""
    crops = native_crops(monkeypatch)
    batched = _decode(job, epoch, indices)
    made = len(crops)
    with monkeypatch.context() as loop:
        one_sample_at_a_time(loop)
        return batched, _decode(job, epoch, indices), made


@pytest.mark.parametrize("random_crop", [True, False])
@pytest.mark.parametrize("flip", [True, False])
def test_its_draws_are_the_generators(random_crop: bool, flip: bool) -> None:
    """Each sample's (top, left, flip) drawn from the seed words of its generator is what
    ImageTransform._crop_at draws from ``sample_rng`` itself, for crops that leave no room (nothing
    drawn) to bounds past 2^30."""
    assert jpeg_crop.available()
    picks = np.random.default_rng(0)
    sizes = [(224, 224), (225, 224), (256, 256), (257, 131), (1000, 3000), (2**31 - 1, 7), (3, 2**30 + 3)]
    for seed, epoch in ((0, 0), (11, 3), (2**63 + 5, 7), (-1, 2**32 + 1)):
        indices = [*picks.integers(0, 2**32, 60).tolist(), 0, 1, 2**32 - 1]
        words = seed_words(seed, epoch, indices)
        assert words is not None
        for at, index in enumerate(indices):
            height, width = sizes[at % len(sizes)]
            crop = ImageTransform(size=[min(height, 224), min(width, 120)],
                                  mode="random_crop" if random_crop else "center_crop", flip=flip)
            expected = crop._crop_at(sample_rng(seed, epoch, index), height, width)
            assert jpeg_crop.crop_draws(words[at], height, width, crop.height, crop.width, random_crop,
                                        flip) == expected, (seed, epoch, index, height, width)


@pytest.mark.parametrize(("args", "natively"), [
    ({"size": CROP}, 16),  # the batch's 16 JPEGs (a CMYK one, a PNG and a small one are not)
    ({"size": CROP, "mode": "center_crop"}, 16),
    ({"size": CROP, "flip": False}, 16),
    ({"size": CROP, "channels": 1}, 16),
    ({"size": [131, 257]}, 5),  # the five 257 x 131 JPEGs whole; the others are resized
], ids=["random crop", "center crop", "no flip", "grayscale", "crop as large as some images"])
def test_a_batch_made_in_one_call_is_the_loops_bytes(dataset: DatasetIndex, monkeypatch: pytest.MonkeyPatch,
                                                     args: dict[str, Any], natively: int) -> None:
    """JPEGs of every kind, CMYK, PNG and an image smaller than the crop, across files and row
    groups, with int32, uint8, bool, float32 and float16 columns beside: the message is the loop's,
    byte for byte, in every epoch."""
    job = _job(dataset, args)
    indices = [16, 3, 0, 15, 1, 7, 2, 11, 9, 4, 13, 5, 6, 8, 10, 12, 14, 3]
    for epoch in (0, 1):
        batched, loop, made = _both_ways(monkeypatch, job, epoch, indices)
        assert bytes(batched.message) == bytes(loop.message)
        assert made == natively
    assert loop.arrays["label"].dtype == np.int64 and loop.arrays["half"].dtype == np.float64


def test_a_large_binary_image_column_gives_the_same_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    index = _write(tmp_path, _images(), pa.large_binary())
    batched, loop, made = _both_ways(monkeypatch, _job(index, {"size": CROP}), 2, [4, 0, 9, 2, 1])
    assert made == 5 and bytes(batched.message) == bytes(loop.message)


@pytest.mark.parametrize("name", list(_damaged()))
def test_a_damaged_jpeg_gives_its_batch_what_the_loop_gives_it(dataset: DatasetIndex,
                                                               monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """The same error naming the sample, or (damage a decoder passes over) the same bytes."""
    damaged = DAMAGED_FROM + list(_damaged()).index(name)
    job = _job(dataset, {"size": CROP})
    outcomes = []
    for one_at_a_time in (False, True):
        with monkeypatch.context() as context:
            if one_at_a_time:
                one_sample_at_a_time(context)
            try:
                outcomes.append(bytes(_decode(job, 0, [0, 1, damaged, 2]).message))
            except CorruptSample as exc:
                assert f"sample {damaged} " in str(exc)
                outcomes.append(re.sub(r" at 0x[0-9a-f]+", "", str(exc)))  # Pillow names its BytesIO
    assert outcomes[0] == outcomes[1]
    if name != "a byte flipped":
        assert isinstance(outcomes[0], str)


def test_a_damaged_jpeg_replaced_gives_the_loops_batch(dataset: DatasetIndex, monkeypatch: pytest.MonkeyPatch) -> None:
    """on_corrupt='skip': the loop replaces the sample, and the batch is its batch."""
    damaged = DAMAGED_FROM
    batched, loop, _ = _both_ways(monkeypatch, _job(dataset, {"size": CROP}, "skip"), 0, [0, damaged, 2, 4])
    assert batched.replaced == loop.replaced == 1 and batched.indices.tolist() == loop.indices.tolist()
    assert bytes(batched.message) == bytes(loop.message)


@pytest.mark.parametrize("column", [
    pa.array([1, 2**63 + 1], pa.uint64()),  # not an int64 past 2^63
    pa.array(["a", "b"]),
    pa.array([1, None], pa.int64()),  # a null: the loop's value is None
    pa.array([[1, 2], [3, 4]]),
], ids=["uint64", "strings", "a null", "lists"])
def test_other_columns_leave_the_batch_to_the_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   column: pa.Array) -> None:
    """Columns whose Python values the loop keeps as they are: the native call is not made, and
    nothing of the batch is counted twice (the loop makes it, natively one sample at a time)."""
    images = [JPEG_KINDS["workload q90"], JPEG_KINDS["grayscale"]]
    pq.write_table(pa.table({"image": images, "other": column}), tmp_path / "part-0.parquet")
    index = index_dataset((str(tmp_path),))
    batches: list[Any] = []
    real = jpeg_crop.crop_batch
    monkeypatch.setattr(jpeg_crop, "crop_batch", lambda *args: batches.append(args) or real(*args))
    crops = native_crops(monkeypatch)
    try:
        _decode(_job(index, {"size": CROP}), 0, [1, 0])
    except CorruptSample:
        pass  # a null, or values that do not stack: the loop's answer
    assert batches == [] and crops.count(False) <= 1  # the first sample frames the loop's message


def test_a_batch_past_max_batch_bytes_is_refused_as_the_loop_refuses_it(dataset: DatasetIndex) -> None:
    job = dataclasses.replace(_job(dataset, {"size": CROP}), max_batch_bytes=100_000)
    with pytest.raises(Exception, match=r"passes 100,000 bytes with its first 3 of 4 samples"):
        _decode(job, 0, [0, 1, 2, 4])


def test_samples_the_cache_holds_are_cropped_in_one_call_without_reading_their_rows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A warm batch: the prepared images are cropped and flipped by one native call as augment
    would, their labels come from the cache, and no row group is read for them."""
    index = _write(tmp_path / "data", _images())
    job, indices = _job(index, {"size": CROP}), [4, 0, 15, 9, 2, 16, 17]  # JPEGs, CMYK, PNG, the small one
    transform = build_transform(job.spec.transform, job.spec.transform_args, ())
    cache = PreparedCache([chunked_tier("memory", tmp_path / "m")], SharedReadCounters(),
                          budget=WriteBudget(bank_s=1e9))
    samples = cache.for_job(index, prepare_identity("image", job.spec.transform_args, [], transform))
    reader = memory_reader(index)
    with monkeypatch.context() as loop:
        one_sample_at_a_time(loop)
        expected = bytes(decode_batch(job, reader, transform, 3, np.array(indices), FrameHeader(3, 1, 4)).message)
    decode_batch(job, reader, transform, 0, np.array(indices), FrameHeader(0, 1, 4), prepared_samples=samples)
    read: list[Any] = []
    real_pieces = ShardReader.pieces
    monkeypatch.setattr(ShardReader, "pieces", lambda self, at: read.append(at) or real_pieces(self, at))
    crops: list[Any] = []
    real = jpeg_crop.crop_pixels_batch
    monkeypatch.setattr(jpeg_crop, "crop_pixels_batch", lambda images, *args: crops.append(sorted(images))
                        or real(images, *args))
    warm = decode_batch(job, reader, transform, 3, np.array(indices), FrameHeader(3, 1, 4), prepared_samples=samples)
    assert bytes(warm.message) == expected
    assert crops == [list(range(len(indices)))] and read == []


def test_a_row_groups_view_is_made_once_and_dropped_with_its_row_group() -> None:
    """What the path needs of a row group (the JPEGs' addresses, the number columns) is worked out
    on its first batch and reused by the next; the view goes when its table does."""
    views = NativeViews()
    table = pa.table({"image": pa.array([b"ab", b"", b"cdef"]), "label": pa.array([3, 1, 2], pa.int32()),
                      "flag": pa.array([True, False, True])})
    view = views.get(table, "image")
    assert view is not None and views.get(table, "image") is view and len(views) == 1
    assert view.names == ["image", "label", "flag"]
    assert view.sizes.tolist() == [2, 0, 4]
    assert (view.numbers["label"].dtype, view.numbers["label"].tolist()) == (np.dtype(np.int64), [3, 1, 2])
    assert view.numbers["flag"].tolist() == [True, False, True]
    assert (view.pointers[2] - view.pointers[0]).item() == 2  # into the table's own buffer
    del table, view
    assert len(views) == 0


def test_a_row_group_split_in_chunks_keeps_the_buffer_its_addresses_point_into() -> None:
    parts = [pa.array([b"\x01" * 5, b"\x02" * 3]), pa.array([b"\x03" * 4])]
    table = pa.table({"image": pa.chunked_array(parts), "label": pa.chunked_array([[1, 2], [3]])})
    view = NativeViews().get(table, "image")
    assert view is not None
    assert [ctypes.string_at(int(p), int(n)) for p, n in zip(view.pointers, view.sizes, strict=True)] == \
        [b"\x01" * 5, b"\x02" * 3, b"\x03" * 4]


@pytest.mark.parametrize("table", [
    pa.table({"image": pa.array([b"ab", None]), "label": [1, 2]}),  # a null image
    pa.table({"image": pa.array([b"ab", b"c"]), "label": pa.array([1, None])}),  # a null number
    pa.table({"image": pa.array([b"ab", b"c"]), "name": ["a", "b"]}),  # a string column
    pa.table({"image": pa.array(["ab", "c"]), "label": [1, 2]}),  # the image as text
])
def test_a_row_group_the_path_does_not_take_has_no_view(table: pa.Table) -> None:
    assert NativeViews().get(table, "image") is None
