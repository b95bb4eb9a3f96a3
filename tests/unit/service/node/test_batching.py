"""decode_batch: plain columns, the image transform's determinism, corrupt sample policies."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from shardstream.proto.errors import BatchTooLarge, CorruptSample, InvalidJobSpec
from shardstream.proto.wire import BatchFrame, FrameHeader, encode_batch, parse_batch
from shardstream.service.dataset import DatasetIndex
from shardstream.service.formats import index_dataset
from shardstream.service.node.batch_bytes import check_batch_bytes, gathered_nbytes
from shardstream.service.node.batching import DecodedBatch, decode_batch
from shardstream.service.node.frame_filler import FrameFiller
from shardstream.service.node_messages import DecodeJob
from shardstream.service.transforms import SampleTransform, build_transform
from shardstream.service.transforms.base import collate, collated_specs
from shardstream.service.transforms.job_schema import check_job_schema
from shardstream.service.transforms.pieces import Piece
from tests.datasets import memory_reader, write_images, write_indexed
from tests.native_crops import native_crops, one_sample_at_a_time

IMAGE_ARGS: dict[str, Any] = {"size": 16, "mode": "random_crop", "flip": True}


def _job(index: DatasetIndex, transform: str = "", args: dict[str, Any] | None = None,
         on_corrupt: str = "fail", seed: int = 3, augment_seed: int | None = None) -> DecodeJob:
    return DecodeJob.alone("j", index, transform=transform, transform_args=args or {}, seed=seed,
                           on_corrupt=on_corrupt, augment_seed=augment_seed)


def _decode(job: DecodeJob, epoch: int, indices: list[int]) -> DecodedBatch:
    reader = memory_reader(job.index, list(job.spec.columns) or None)
    transform: SampleTransform | None = build_transform(job.spec.transform, job.spec.transform_args, ())
    return decode_batch(job, reader, transform, epoch, np.array(indices, dtype=np.int64))


@pytest.fixture(scope="module")
def columns_index(tmp_path_factory: pytest.TempPathFactory) -> DatasetIndex:
    directory = tmp_path_factory.mktemp("cols")
    write_indexed(str(directory), [5, 0, 6], row_group_size=2, features=4)
    return index_dataset((str(directory),))


@pytest.fixture(scope="module")
def images_index(tmp_path_factory: pytest.TempPathFactory) -> DatasetIndex:
    directory = tmp_path_factory.mktemp("imgs")
    write_images(str(directory), [6, 7], corrupt=(4, 5, 12))
    return index_dataset((str(directory),))


def test_no_transform_gives_column_arrays(columns_index: DatasetIndex) -> None:
    indices = [10, 0, 7, 7, 3]
    batch = _decode(_job(columns_index), 0, indices)
    assert set(batch.arrays) == {"idx", "x", "y"}
    np.testing.assert_array_equal(batch.arrays["idx"], indices)
    assert batch.arrays["idx"].dtype == np.int64
    assert batch.arrays["y"].dtype == np.int32
    np.testing.assert_array_equal(batch.arrays["y"], np.array(indices) % 10)
    x = batch.arrays["x"]
    assert x.shape == (5, 4) and x.dtype == np.float32
    np.testing.assert_array_equal(x, np.repeat(np.array(indices, np.float32)[:, None], 4, axis=1))
    np.testing.assert_array_equal(batch.indices, indices)
    assert batch.replaced == 0
    assert batch.nbytes == sum(a.nbytes for a in batch.arrays.values()) > 0


def test_image_batch_shapes(images_index: DatasetIndex) -> None:
    batch = _decode(_job(images_index, "image", IMAGE_ARGS), 0, [0, 1, 2, 3])
    assert batch.arrays["image"].shape == (4, 3, 16, 16)
    assert batch.arrays["image"].dtype == np.uint8
    np.testing.assert_array_equal(batch.arrays["label"], [0, 1, 2, 3])
    np.testing.assert_array_equal(batch.arrays["idx"], [0, 1, 2, 3])


def test_augmentation_depends_on_seed_epoch_index_only(images_index: DatasetIndex) -> None:
    job = _job(images_index, "image", IMAGE_ARGS)
    a = _decode(job, 4, [0, 1, 2, 3, 6, 7, 8])
    b = _decode(job, 4, [8, 3, 11, 0])  # other composition, other order, other reader
    for i in (0, 3, 8):
        pos_a, pos_b = [0, 1, 2, 3, 6, 7, 8].index(i), [8, 3, 11, 0].index(i)
        np.testing.assert_array_equal(a.arrays["image"][pos_a], b.arrays["image"][pos_b])


def test_augmentation_changes_with_epoch_and_seed(images_index: DatasetIndex) -> None:
    indices = [0, 1, 2, 3, 6, 7, 8, 9, 10, 11]
    e0 = _decode(_job(images_index, "image", IMAGE_ARGS), 0, indices).arrays["image"]
    e1 = _decode(_job(images_index, "image", IMAGE_ARGS), 1, indices).arrays["image"]
    s9 = _decode(_job(images_index, "image", IMAGE_ARGS, seed=9), 0, indices).arrays["image"]
    assert not np.array_equal(e0, e1)
    assert not np.array_equal(e0, s9)


@pytest.mark.parametrize("batched", [True, False], ids=["one native call", "one sample at a time"])
def test_augment_seed_draws_the_augmentations_seed_would_and_nothing_else(
        images_index: DatasetIndex, monkeypatch: pytest.MonkeyPatch, batched: bool) -> None:
    if not batched:
        one_sample_at_a_time(monkeypatch)
    crops = native_crops(monkeypatch)
    indices = np.array([7, 1, 3, 0, 2, 8], dtype=np.int64)  # 0, 2 and 8 are JPEGs

    def images(seed: int, augment_seed: int | None = None) -> np.ndarray:
        job = _job(images_index, "image", IMAGE_ARGS, seed=seed, augment_seed=augment_seed)
        built = build_transform(job.spec.transform, job.spec.transform_args, ())
        framed = decode_batch(job, memory_reader(job.index), built, 1, indices, FrameHeader(1, 0, 3), _one_slot())
        return np.array(framed.arrays["image"])

    own = images(3, augment_seed=9)
    assert len(crops) == 3  # the native crop made the JPEGs' rows
    np.testing.assert_array_equal(own, images(9))
    assert not np.array_equal(own, images(3))
    assert not np.array_equal(images(3, augment_seed=0), images(3))  # 0 is a seed, not "unset"


def test_corrupt_sample_fails_naming_file_and_row(images_index: DatasetIndex) -> None:
    with pytest.raises(CorruptSample) as info:
        _decode(_job(images_index, "image", IMAGE_ARGS), 0, [0, 12])
    message = str(info.value)
    assert "sample 12" in message
    assert "row 6 of" in message  # shard 1 starts at global index 6
    assert "img-00001.parquet" in message


def test_skip_replaces_with_the_next_clean_sample(images_index: DatasetIndex) -> None:
    job = _job(images_index, "image", IMAGE_ARGS, on_corrupt="skip")
    batch = _decode(job, 2, [1, 4, 12, 3])
    assert batch.replaced == 2
    np.testing.assert_array_equal(batch.indices, [1, 6, 0, 3])  # 4,5 corrupt -> 6; 12 wraps -> 0
    np.testing.assert_array_equal(batch.arrays["idx"], [1, 6, 0, 3])
    direct = _decode(job, 2, [6, 0])
    np.testing.assert_array_equal(batch.arrays["image"][1:3], direct.arrays["image"])
    again = _decode(job, 2, [1, 4, 12, 3])
    np.testing.assert_array_equal(batch.arrays["image"], again.arrays["image"])


def test_skip_gives_up_when_no_sample_can_replace(tmp_path: Path) -> None:
    write_images(str(tmp_path), [3], corrupt=(0, 1, 2))
    job = _job(index_dataset((str(tmp_path),)), "image", IMAGE_ARGS, on_corrupt="skip")
    with pytest.raises(CorruptSample, match=r"sample 1 .*none of the next"):
        _decode(job, 0, [1])


def test_check_job_schema(columns_index: DatasetIndex, images_index: DatasetIndex) -> None:
    check_job_schema(columns_index.schema, None)
    image = build_transform("image", IMAGE_ARGS, ())
    check_job_schema(images_index.schema, image)
    with pytest.raises(InvalidJobSpec, match="image"):
        check_job_schema(images_index.schema, None)  # binary column without a transform
    with pytest.raises(InvalidJobSpec, match="image"):
        check_job_schema(columns_index.schema, image)


def test_columns_decoded_with_their_header_come_framed_as_encode_batch_would_frame_them(
        columns_index: DatasetIndex) -> None:
    """The batch server's path: pre-decoded columns gathered straight into the message, the same
    bytes encode_batch gives for the arrays decoded without a header."""
    job, indices = _job(columns_index), np.array([10, 0, 7, 7, 3], dtype=np.int64)
    reader = memory_reader(job.index)
    plain = decode_batch(job, reader, None, 2, indices)
    framed = decode_batch(job, reader, None, 2, indices, FrameHeader(2, 1, 5))
    assert plain.message is None and framed.message is not None
    assert framed.message == encode_batch(2, 1, 5, plain.arrays, plain.indices)
    view = parse_batch(framed.message)
    assert (view.epoch, view.rank, view.step) == (2, 1, 5)
    for tensor in view.tensors:
        np.testing.assert_array_equal(tensor.array(), plain.arrays[tensor.name])
    assert framed.nbytes == plain.nbytes


def test_a_transforms_samples_are_stacked_into_the_message_encode_batch_would_give(
        images_index: DatasetIndex) -> None:
    job, indices = _job(images_index, "image", IMAGE_ARGS, on_corrupt="skip"), np.array([1, 4, 3], dtype=np.int64)
    reader = memory_reader(job.index)
    built = build_transform(job.spec.transform, job.spec.transform_args, ())
    plain = decode_batch(job, reader, built, 0, indices)
    framed = decode_batch(job, reader, built, 0, indices, FrameHeader(0, 2, 7))
    assert plain.message is None and framed.message is not None
    assert framed.replaced == 1  # sample 4 is corrupt: the trailer carries the replacement
    assert framed.message == encode_batch(0, 2, 7, plain.arrays, plain.indices, plain.replaced)
    assert framed.arrays["image"].shape == (3, 3, 16, 16) and framed.nbytes == plain.nbytes


class _MixedDtypes:
    """Samples whose dtypes differ: stacked, they take the widest, as np.stack gives."""

    def prepare(self, row: dict[str, Any]) -> dict[str, Any]:
        return {"x": np.full(2, row["idx"], dtype=np.float32 if row["idx"] % 2 else np.float64)}

    def augment(self, sample: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
        return sample


class _OwnCollate(_MixedDtypes):
    def collate(self, samples: list[dict[str, Any]]) -> dict[str, np.ndarray]:
        return {"x": np.concatenate([s["x"] for s in samples])}


def test_framed_samples_take_the_dtype_np_stack_would_give(columns_index: DatasetIndex) -> None:
    job, indices = _job(columns_index), np.array([1, 2, 3], dtype=np.int64)
    reader = memory_reader(job.index)
    plain = decode_batch(job, reader, _MixedDtypes(), 0, indices)
    framed = decode_batch(job, reader, _MixedDtypes(), 0, indices, FrameHeader(0, 0, 0))
    assert plain.arrays["x"].dtype == np.float64 and framed.message is not None
    assert framed.message == encode_batch(0, 0, 0, plain.arrays, plain.indices)


def _one_slot() -> Any:
    """An allocate that gives the same memory every time, as a rank's shared-memory slot does."""
    memory = np.zeros(1 << 20, dtype=np.uint8)

    def allocate(size: int) -> tuple[np.ndarray, np.ndarray]:
        return memory[:size], memory[:size]

    return allocate


def test_samples_copied_into_the_message_before_one_that_differs_are_framed_again_intact(
        columns_index: DatasetIndex) -> None:
    """Each sample is copied into the message as it is made; a later one with another dtype stops
    that, and the batch is framed again, in the same memory when the memory is a slot: the samples
    copied so far must come out of it first."""
    job, indices = _job(columns_index), np.array([1, 3, 2, 5], dtype=np.int64)  # float32, float32, float64, ...
    reader = memory_reader(job.index)
    plain = decode_batch(job, reader, _MixedDtypes(), 0, indices)
    framed = decode_batch(job, reader, _MixedDtypes(), 0, indices, FrameHeader(0, 0, 0), _one_slot())
    assert bytes(framed.message) == encode_batch(0, 0, 0, plain.arrays, plain.indices)


def test_a_replaced_sample_after_copied_ones_is_framed_with_its_index_in_a_slot(images_index: DatasetIndex) -> None:
    job = _job(images_index, "image", IMAGE_ARGS, on_corrupt="skip")
    indices = np.array([1, 3, 4, 0], dtype=np.int64)  # 4 is corrupt: replaced by 6
    reader = memory_reader(job.index)
    built = build_transform(job.spec.transform, job.spec.transform_args, ())
    plain = decode_batch(job, reader, built, 0, indices)
    framed = decode_batch(job, reader, built, 0, indices, FrameHeader(0, 1, 2), _one_slot())
    assert framed.replaced == 1 and framed.indices.tolist() == [1, 3, 6, 0]
    assert bytes(framed.message) == encode_batch(0, 1, 2, plain.arrays, plain.indices, plain.replaced)


@pytest.mark.parametrize("batched", [True, False], ids=["one native call", "one sample at a time"])
def test_samples_framed_as_they_are_made_are_the_bytes_the_stack_gives(images_index: DatasetIndex,
                                                                       monkeypatch: pytest.MonkeyPatch,
                                                                       batched: bool) -> None:
    """PNGs and JPEGs: the JPEGs are decoded straight into their rows by the native crop (one
    sample at a time: those after the first sample, which frames the message), and the message is
    what the Python path stacks."""
    if not batched:
        one_sample_at_a_time(monkeypatch)
    crops = native_crops(monkeypatch)
    job, indices = _job(images_index, "image", IMAGE_ARGS), np.array([7, 1, 3, 0, 2, 8], dtype=np.int64)
    reader = memory_reader(job.index)
    built = build_transform(job.spec.transform, job.spec.transform_args, ())
    plain = decode_batch(job, reader, built, 1, indices)
    assert crops == []  # no message to write into
    framed = decode_batch(job, reader, built, 1, indices, FrameHeader(1, 0, 3), _one_slot())
    assert len(crops) == 3  # samples 0, 2 and 8 are JPEGs
    assert bytes(framed.message) == encode_batch(1, 0, 3, plain.arrays, plain.indices)
    assert np.shares_memory(framed.arrays["image"], framed.message)  # no copy after the last sample


def test_a_replaced_sample_after_natively_made_ones_leaves_them_intact(images_index: DatasetIndex,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    one_sample_at_a_time(monkeypatch)  # the batch made in one native call: test_native_batch.py
    crops = native_crops(monkeypatch)
    job = _job(images_index, "image", IMAGE_ARGS, on_corrupt="skip")
    indices = np.array([1, 0, 2, 12, 8], dtype=np.int64)  # 12, corrupt and the last: replaced by 0
    reader = memory_reader(job.index)
    built = build_transform(job.spec.transform, job.spec.transform_args, ())
    plain = decode_batch(job, reader, built, 2, indices)
    framed = decode_batch(job, reader, built, 2, indices, FrameHeader(2, 0, 1), _one_slot())
    assert len(crops) == 2 and framed.indices.tolist() == [1, 0, 2, 0, 8]  # 8: after the filler stopped
    assert bytes(framed.message) == encode_batch(2, 0, 1, plain.arrays, plain.indices, plain.replaced)


def test_a_transform_with_its_own_collate_is_left_for_the_batch_server_to_frame(
        columns_index: DatasetIndex) -> None:
    job = _job(columns_index)
    batch = decode_batch(job, memory_reader(job.index), _OwnCollate(), 0, np.array([1, 2], dtype=np.int64),
                         FrameHeader(0, 0, 0))
    assert batch.message is None and batch.arrays["x"].shape == (4,)


class _ObjectAtSeven:
    """Sample 7 gives a value no tensor holds (a list of mixed things: numpy's object dtype)."""

    def prepare(self, row: dict[str, Any]) -> dict[str, Any]:
        return {"x": np.array([row["idx"], None] if row["idx"] == 7 else [row["idx"], 0], dtype=object
                              if row["idx"] == 7 else np.int64)}


@pytest.mark.parametrize("framed", [False, True])
def test_a_value_that_cannot_travel_fails_its_batch_naming_the_sample_file_and_row(
        columns_index: DatasetIndex, framed: bool) -> None:
    job, indices = _job(columns_index), np.array([6, 7, 8], dtype=np.int64)
    header = FrameHeader(0, 0, 0) if framed else None
    with pytest.raises(CorruptSample, match=rf"sample 7 \(row 2 of {columns_index.shards[2].url}\) gives 'x' as "
                                            "object.*cannot travel"):
        decode_batch(job, memory_reader(job.index), _ObjectAtSeven(), 0, indices, header)


class _Counting:
    """The image transform, counting the samples it prepared."""

    def __init__(self) -> None:
        self.image = build_transform("image", IMAGE_ARGS, ())
        self.prepared = 0

    def prepare(self, row: dict[str, Any]) -> dict[str, Any]:
        self.prepared += 1
        return self.image.prepare(row)  # type: ignore[no-any-return]

    def augment(self, sample: dict[str, Any], generator: Any) -> dict[str, Any]:
        return self.image.augment(sample, generator)  # type: ignore[no-any-return]


def test_a_batch_past_max_batch_bytes_stops_being_built_at_that_sample(images_index: DatasetIndex) -> None:
    """3 x 16 x 16 uint8 samples (768 bytes with their label): a bound of 2,000 bytes is passed by
    the third sample, and the decoder prepares no fourth before refusing."""
    job = DecodeJob.alone("j", images_index, columns=("image", "label"), transform="image",
                    transform_args=IMAGE_ARGS, seed=3, on_corrupt="fail",
                    max_batch_bytes=2_000)
    counting = _Counting()
    reader = memory_reader(images_index, ["image", "label"])
    with pytest.raises(BatchTooLarge, match=r"passes 2,000 bytes with its first 3 of 6 samples .* lower batch_size"):
        decode_batch(job, reader, counting, 0, np.array([0, 1, 2, 3, 6, 7], dtype=np.int64))  # type: ignore[arg-type]
    assert counting.prepared == 3
    assert len(decode_batch(dataclasses.replace(job, max_batch_bytes=10_000), reader, counting, 0,
                            np.array([0, 1, 2, 3, 6, 7], dtype=np.int64)).indices) == 6  # type: ignore[arg-type]


def test_plain_columns_past_max_batch_bytes_are_refused_before_gathering(columns_index: DatasetIndex) -> None:
    job = dataclasses.replace(_job(columns_index), max_batch_bytes=64)
    with pytest.raises(BatchTooLarge, match=r"passes 64 bytes with its samples"):
        _decode(job, 0, [10, 0, 7, 7, 3])
    assert len(_decode(dataclasses.replace(job, max_batch_bytes=1 << 20), 0, [10, 0, 7, 7, 3]).indices) == 5


def test_a_sample_made_in_its_row_whose_label_does_not_fit_is_framed_again_intact() -> None:
    """A sample a transform wrote into the rows `place` gave, with a label of a wider dtype than
    the first sample's: it is copied out of the message, which is then framed again in the same
    slot memory (its image now further in), and every sample keeps its pixels."""
    allocate, used = _one_slot(), np.arange(3, dtype=np.int64)
    samples: list[dict[str, Any]] = []
    filler = FrameFiller(FrameHeader(0, 0, 0), used, allocate, samples)
    assert filler.place() is None  # nothing framed before the first sample
    filler.append({"label": np.full(40, 5, np.int8), "image": np.full((3, 8, 8), 1, np.uint8)})
    for fill, label in ((2, np.full(40, 6, np.int8)), (3, np.full(40, 7, np.int64))):
        rows = filler.place()
        assert rows is not None
        rows["image"][...] = fill
        filler.append({"label": label, "image": rows["image"]})
    assert filler.filled() is None
    frame = BatchFrame(FrameHeader(0, 0, 0), collated_specs(samples), used, 0, allocate)
    arrays = collate(samples, out=frame.arrays)
    assert [sorted(set(image.ravel().tolist())) for image in arrays["image"]] == [[1], [2], [3]]
    assert arrays["label"].dtype == np.int64 and arrays["label"][:, 0].tolist() == [5, 6, 7]


def test_a_batch_of_row_groups_viewing_part_of_their_buffers_is_measured_by_what_it_takes() -> None:
    """The quick size (whole buffers) passes the bound only when the rows taken do not: then the
    views' own bytes decide, and a batch within the bound is not refused."""
    whole = pa.table({"x": np.arange(1000, dtype=np.int64)})
    part = whole.slice(0, 100)  # views 800 of the buffer's 8,000 bytes
    pieces = [Piece(part, np.arange(50), np.arange(50))]
    assert gathered_nbytes(pieces) == 400
    assert gathered_nbytes(pieces, 10_000) == 4_000  # whole buffers, within the bound: the quick answer
    assert gathered_nbytes(pieces, 1_000) == 400  # past it on whole buffers: the rows' own bytes
    check_batch_bytes(gathered_nbytes(pieces, 1_000), 1_000, 50, 50, lambda: "samples 0-49")
    with pytest.raises(BatchTooLarge):
        check_batch_bytes(gathered_nbytes(pieces, 300), 300, 50, 50, lambda: "samples 0-49")
