"""The tokenize transform through decode_batch: padded batches of the reference's ids, corrupt
texts named by file and row (or replaced), and the prepared-sample cache keeping the ids so a
second epoch or a second job never tokenizes again, and a changed tokenizer.json never serves
the old ids."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tokenizers import Tokenizer

from shardstream.proto.errors import CorruptSample
from shardstream.proto.wire import FrameHeader
from shardstream.service.dataset import DatasetIndex
from shardstream.service.formats import index_dataset
from shardstream.service.node.batching import DecodedBatch, decode_batch
from shardstream.service.node.job_samples import JobSamples
from shardstream.service.node.prepared_cache import PreparedCache
from shardstream.service.node.read_counters import SharedReadCounters
from shardstream.service.node.write_budget import WriteBudget
from shardstream.service.node_messages import DecodeJob
from shardstream.service.transforms import build_transform
from shardstream.service.transforms.collate import Collation
from shardstream.service.transforms.tokenize import TokenizeTransform
from tests.cache_tiers import chunked_tier
from tests.datasets import memory_reader
from tests.text_datasets import TEXTS, bpe_tokenizer, save, wordpiece_tokenizer, write_texts

PAD = Collation("pad", -1)
ARGS: dict[str, Any] = {"add_bos": True, "bos_token": "<s>", "add_eos": True, "eos_token": "</s>",
                        "max_length": 48, "keep": ["idx"]}


@pytest.fixture(scope="module")
def bpe(tmp_path_factory: pytest.TempPathFactory) -> str:
    return save(bpe_tokenizer(), str(tmp_path_factory.mktemp("bpe") / "tokenizer.json"))


@pytest.fixture(scope="module")
def texts(tmp_path_factory: pytest.TempPathFactory) -> DatasetIndex:
    directory = tmp_path_factory.mktemp("texts")
    write_texts(str(directory), TEXTS, row_group_size=3)
    return index_dataset((str(directory),))


class Counting:
    """The transform's tokenizer, counting the texts it encodes."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer, self.encoded = tokenizer, 0

    def encode(self, text: str, add_special_tokens: bool = False) -> Any:
        self.encoded += 1
        return self.tokenizer.encode(text, add_special_tokens=add_special_tokens)

    def encode_batch_fast(self, texts: list[str], add_special_tokens: bool = False) -> Any:
        self.encoded += len(texts)
        return self.tokenizer.encode_batch_fast(texts, add_special_tokens=add_special_tokens)


def transform_of(path: str, **args: Any) -> TokenizeTransform:
    built = build_transform("tokenize", {"tokenizer": path, **args}, ())
    assert isinstance(built, TokenizeTransform)
    built.tokenizer = Counting(built.tokenizer)  # type: ignore[assignment]
    return built


def job_of(index: DatasetIndex, path: str, on_corrupt: str = "fail", **args: Any) -> DecodeJob:
    return DecodeJob.alone("j", index, transform="tokenize", transform_args={"tokenizer": path, **args},
                           collate="pad", pad_value=-1, on_corrupt=on_corrupt)


def decode(job: DecodeJob, transform: TokenizeTransform, indices: list[int], epoch: int = 0,
           samples: JobSamples | None = None, header: FrameHeader | None = None) -> DecodedBatch:
    return decode_batch(job, memory_reader(job.index), transform, epoch, np.array(indices, dtype=np.int64),
                        header, prepared_samples=samples, collation=PAD)


def expected_ids(path: str, text: str, max_length: int = 48) -> list[int]:
    tokenizer = Tokenizer.from_file(path)
    tokenizer.enable_truncation(max_length - 2)
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    return [tokenizer.token_to_id("<s>"), *ids, tokenizer.token_to_id("</s>")]


def check_batch(batch: DecodedBatch, path: str, indices: list[int]) -> None:
    """Each row the reference's ids, then -1 to the batch's longest; lengths and kept idx."""
    ids, lengths = np.asarray(batch.arrays["input_ids"]), np.asarray(batch.arrays["input_ids_lengths"])
    assert list(batch.arrays) == ["input_ids", "input_ids_lengths", "idx"]
    assert ids.dtype == np.int64 and lengths.dtype == np.int64
    np.testing.assert_array_equal(batch.arrays["idx"], indices)
    for row, index in enumerate(indices):
        want = expected_ids(path, TEXTS[index])
        assert lengths[row] == len(want) and ids[row, : len(want)].tolist() == want
        assert (ids[row, len(want):] == -1).all()
    assert ids.shape == (len(indices), lengths.max())


@pytest.mark.parametrize("header", [None, FrameHeader(0, 0, 0)])
def test_a_batch_holds_the_reference_ids_padded_with_their_lengths(
        bpe: str, texts: DatasetIndex, header: FrameHeader | None) -> None:
    indices = [12, 0, 9, 5, 17, 3, 10, 14]  # the empty text, CJK, emoji, the long one...
    batch = decode(job_of(texts, bpe, **ARGS), transform_of(bpe, **ARGS), indices, header=header)
    check_batch(batch, bpe, indices)


def test_without_collate_pad_a_batch_says_to_use_it(bpe: str, texts: DatasetIndex) -> None:
    job = DecodeJob.alone("j", texts, transform="tokenize", transform_args={"tokenizer": bpe})
    with pytest.raises(CorruptSample, match=r"does not collate: .*'input_ids' has values of \d+ shapes .*"
                                            r"collate='pad' pads them"):
        decode_batch(job, memory_reader(texts), transform_of(bpe), 0, np.array([0, 1, 2]),
                     FrameHeader(0, 0, 0))


@pytest.fixture(scope="module")
def with_bad_rows(tmp_path_factory: pytest.TempPathFactory) -> DatasetIndex:
    """Six texts; row 2 of the second file (sample 5) is null."""
    directory = tmp_path_factory.mktemp("with_bad_rows")
    write_texts(str(directory), ["a", "b", "c", "d", "e", None], row_group_size=2)
    return index_dataset((str(directory),))


def test_a_null_text_fails_its_batch_naming_file_and_row_or_is_replaced_under_skip(
        bpe: str, with_bad_rows: DatasetIndex) -> None:
    with pytest.raises(CorruptSample, match=r"sample 5 \(row 2 of file://.*text-00001\.parquet\) failed in "
                                            r"transform 'tokenize': ValueError: column 'text' holds a null"):
        decode(job_of(with_bad_rows, bpe), transform_of(bpe), [1, 5])
    skipped = decode(job_of(with_bad_rows, bpe, on_corrupt="skip", keep=["idx"]), transform_of(bpe, keep=["idx"]),
                     [1, 5])
    assert skipped.replaced == 1 and skipped.indices.tolist() == [1, 0]  # wrapped to the next readable: 0
    assert skipped.arrays["idx"].tolist() == [1, 0]  # type: ignore[union-attr]


def test_a_value_that_is_not_a_string_is_named_by_file_and_row(bpe: str, tmp_path: Path) -> None:
    """What a job opened without the schema check (the open refuses a column of numbers) meets."""
    pq.write_table(pa.table({"text": pa.array([1, 2, 3], pa.int64())}), tmp_path / "n.parquet")
    index = index_dataset((str(tmp_path),))
    with pytest.raises(CorruptSample, match=r"sample 2 \(row 2 of file://.*n\.parquet\) failed in transform "
                                            r"'tokenize': ValueError: column 'text' holds a int, not a string"):
        decode(job_of(index, bpe), transform_of(bpe), [2])


def cache(directory: Path, counters: SharedReadCounters) -> PreparedCache:
    """The node's tiers in `directory`: another PreparedCache over them is another actor or job."""
    return PreparedCache([chunked_tier("memory", directory / "memory"), chunked_tier("disk", directory / "disk")],
                         counters, budget=WriteBudget(bank_s=1000.0))


def test_a_second_epoch_and_a_second_job_read_prepared_ids_instead_of_tokenizing(
        bpe: str, texts: DatasetIndex, tmp_path: Path) -> None:
    indices = [3, 0, 12, 7, 15, 9]
    job, counters = job_of(texts, bpe, **ARGS), SharedReadCounters()
    plain = decode(job, transform_of(bpe, **ARGS), indices)
    transform = transform_of(bpe, **ARGS)
    samples = cache(tmp_path, counters).for_transform(texts, "tokenize", dict(job.spec.transform_args), [],
                                                      transform)
    assert samples is not None
    for epoch in (0, 1):
        batch = decode(job, transform, indices, epoch, samples)
        for name in plain.arrays:  # the same bytes cold, warm and without the cache
            np.testing.assert_array_equal(np.asarray(batch.arrays[name]), np.asarray(plain.arrays[name]))
    assert transform.tokenizer.encoded == len(indices)  # type: ignore[attr-defined]  # epoch 0 only
    delta = counters.take_delta()
    assert (delta.prepared_misses, delta.prepared_memory_hits) == (len(indices), len(indices))

    second = transform_of(bpe, **ARGS)  # another job with the same dataset, tokenizer and arguments
    again = cache(tmp_path, counters).for_transform(texts, "tokenize", dict(job.spec.transform_args), [], second)
    check_batch(decode(job, second, indices, 0, again), bpe, indices)
    assert second.tokenizer.encoded == 0  # type: ignore[attr-defined]
    assert counters.take_delta().prepared_memory_hits == len(indices)


def test_a_rewritten_tokenizer_file_is_another_key_and_never_serves_the_old_ids(
        bpe: str, texts: DatasetIndex, tmp_path: Path) -> None:
    path = str(tmp_path / "tokenizer.json")
    save(Tokenizer.from_file(bpe), path)
    args = {"keep": ["idx"]}
    indices = [0, 1, 2, 5]
    counters = SharedReadCounters()
    old = transform_of(path, **args)
    old_samples = cache(tmp_path, counters).for_transform(texts, "tokenize", {"tokenizer": path, **args}, [], old)
    assert old_samples is not None
    first = decode(job_of(texts, path, **args), old, indices, 0, old_samples)
    counters.take_delta()

    save(wordpiece_tokenizer(), path)  # the same path and arguments, another tokenizer
    os.utime(path, (1, 1))
    new = transform_of(path, **args)
    new_samples = cache(tmp_path, counters).for_transform(texts, "tokenize", {"tokenizer": path, **args}, [], new)
    assert new_samples is not None and new_samples.identity != old_samples.identity
    batch = decode(job_of(texts, path, **args), new, indices, 1, new_samples)
    delta = counters.take_delta()
    assert (delta.prepared_memory_hits, delta.prepared_misses) == (0, len(indices))
    assert new.tokenizer.encoded == len(indices)  # type: ignore[attr-defined]
    plain = Tokenizer.from_file(path)
    ids, lengths = np.asarray(batch.arrays["input_ids"]), np.asarray(batch.arrays["input_ids_lengths"])
    for row, index in enumerate(indices):
        assert ids[row, : lengths[row]].tolist() == plain.encode(TEXTS[index], add_special_tokens=False).ids
    assert not np.array_equal(np.asarray(first.arrays["input_ids"]), ids)
