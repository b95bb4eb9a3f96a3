"""The prepared-sample cache: one sample as an entry, a tier's chunks and bound, keys, and batches bit-identical with it."""

from __future__ import annotations

import hashlib
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from shardstream.proto.wire import FrameHeader, encode_batch
from shardstream.service.dataset import DatasetIndex
from shardstream.service.formats import index_dataset
from shardstream.service.node import prepared_cache, prepared_tier, sample_index
from shardstream.service.node.batching import decode_batch
from shardstream.service.node.cache_fault import CacheFault
from shardstream.service.node.prepared_cache import PreparedCache, prepare_identity
from shardstream.service.node.prepared_entry import SampleKey, decode_entry, encode_entry
from shardstream.service.node.prepared_peers import PreparedPeers
from shardstream.service.node.prepared_tier import SampleTier
from shardstream.service.node.read_counters import SharedReadCounters
from shardstream.service.node.reader import ShardReader
from shardstream.service.node.sample_index import ENTRY_ALIGN
from shardstream.service.node.tier_chunks import (
    ChunkCache,
    Survey,
    allocate,
    chunk_size_for,
    survey,
)
from shardstream.service.node.write_budget import (
    MAX_SHARE,
    MIN_SHARE,
    REUSE_HIT_RATE,
    WriteBudget,
    share_for,
)
from shardstream.service.node_messages import DecodeJob
from shardstream.service.transforms import build_transform
from tests.cache_tiers import CHUNK, chunked_tier
from tests.datasets import memory_reader, write_images
from tests.native_crops import native_crops, one_sample_at_a_time

IMAGE_ARGS: dict[str, Any] = {"size": 16, "mode": "random_crop", "flip": True}
KEY = SampleKey("prepare", "file:///data/part-0.parquet\x00100\x00v1", 3)


def _bytes(parts: list[Any]) -> bytearray:
    return bytearray(b"".join(bytes(p) for p in parts))


def test_a_sample_reads_back_with_its_values_dtypes_and_python_types() -> None:
    sample = {"image": np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)[:, ::-1], "label": 7,
              "weight": 0.25, "keep": True, "score": np.float16(1.5), "empty": np.zeros((0, 4), np.int32)}
    parts = encode_entry(KEY, sample)
    assert parts is not None
    back = decode_entry(_bytes(parts), KEY)
    assert list(back) == list(sample)
    np.testing.assert_array_equal(back["image"], sample["image"])
    assert back["image"].dtype == np.uint8 and back["image"].flags.writeable
    assert type(back["label"]) is int and back["label"] == 7
    assert type(back["weight"]) is float and type(back["keep"]) is bool
    assert isinstance(back["score"], np.float16) and back["score"] == np.float16(1.5)
    assert back["empty"].shape == (0, 4) and back["empty"].dtype == np.int32


def test_samples_holding_strings_are_not_cached() -> None:
    assert encode_entry(KEY, {"image": np.zeros(3, np.uint8), "path": "a.jpg"}) is None
    assert encode_entry(KEY, {"x": None}) is None


def test_a_damaged_file_is_not_a_sample() -> None:
    parts = encode_entry(KEY, {"x": np.arange(4)})
    assert parts is not None
    with pytest.raises(CacheFault):
        decode_entry(_bytes(parts)[:-8], KEY)
    with pytest.raises(CacheFault):
        decode_entry(bytearray(b"garbage" * 4), KEY)


def _parts(n: int) -> tuple[list[Any], int]:
    parts = encode_entry(KEY, {"x": np.zeros(n, np.uint8)})
    assert parts is not None
    return parts, sum(len(p) for p in parts)


def test_a_full_tier_admits_nothing_more_and_keeps_what_it_holds(tmp_path: Path) -> None:
    parts, size = _parts(3000)
    slot = size + -size % ENTRY_ALIGN
    tier = SampleTier("memory", str(tmp_path), max_bytes=slot * 6, chunk_bytes=slot * 2)  # three chunks of two
    stored = [tier.store("d/s", row, parts, size) for row in range(8)]
    assert stored == [True] * 6 + [False] * 2
    assert all(tier.load_file("d/s", row) is not None for row in range(6))
    assert tier.stored_bytes == tier.allocated_bytes == tier.max_bytes


def test_a_full_tier_makes_room_by_removing_datasets_unused_for_long(tmp_path: Path) -> None:
    parts, size = _parts(3000)
    slot = size + -size % ENTRY_ALIGN
    tier = SampleTier("disk", str(tmp_path), max_bytes=slot * 2, chunk_bytes=slot * 2)
    for row in range(2):
        assert tier.store("old/s", row, parts, size) is True
    assert tier.store("recent/s", 0, parts, size) is False  # "old" was used just now
    tier._full_until = 0.0  # (a full tier is not looked at again for FULL_RETRY_S)
    long_ago = time.time() - 2 * 3600
    os.utime(tier.root / "old", (long_ago, long_ago))
    assert tier.store("new/s", 0, parts, size) is True  # old's chunk given back, and claimed
    assert not (tier.root / "old").exists() and tier.load_file("new/s", 0) is not None
    assert tier.load_file("old/s", 0) is None and tier.allocated_bytes == tier.max_bytes


def test_chunks_given_back_are_claimed_again_before_any_is_allocated(tmp_path: Path) -> None:
    bound = 6 * CHUNK
    tier = SampleTier("memory", str(tmp_path), max_bytes=bound, chunk_bytes=CHUNK)
    allocate(str(tier.root), 2, CHUNK)  # as a dataset removed leaves them
    assert survey(str(tier.root)) == Survey(free_bytes=2 * CHUNK, claimed_bytes=0)
    parts, size = _parts(1000)
    assert tier.store("d/s", 0, parts, size) is True  # a free chunk claimed: nothing allocated
    assert survey(str(tier.root)) == Survey(free_bytes=CHUNK, claimed_bytes=CHUNK)
    tier.close()


def test_a_small_tier_has_small_chunks() -> None:
    assert chunk_size_for(64 << 30) == 32 << 20 and chunk_size_for(64 << 20) == 4 << 20
    assert chunk_size_for(1 << 20) == 1 << 20


def test_a_write_finding_no_chunk_free_allocates_one(tmp_path: Path) -> None:
    parts, size = _parts(1000)
    tier = SampleTier("memory", str(tmp_path), max_bytes=4 * CHUNK, chunk_bytes=CHUNK)
    assert tier.store("d/s", 0, parts, size) is True
    assert survey(str(tier.root)) == Survey(free_bytes=0, claimed_bytes=CHUNK)
    assert tier.load_file("d/s", 0) is not None


def _index(directory: Path, shard_rows: tuple[int, ...] = (5, 4)) -> DatasetIndex:
    write_images(str(directory), list(shard_rows))
    return index_dataset((str(directory),))


def test_a_sample_the_cache_fails_to_keep_costs_a_warning_and_the_batchs_others_are_kept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    counters = SharedReadCounters()
    cache = PreparedCache([chunked_tier("memory", tmp_path / "m")], counters)
    samples = cache.for_job(_index(tmp_path / "data"), "identity")
    store, bad = cache.store, samples._key(1)

    def failing(folder: str, row: int, parts: list[bytes | memoryview], size: int) -> bool:
        if (folder, row) == (bad.folder, bad.row):
            raise OSError("the tier's device went away")
        return store(folder, row, parts, size)

    monkeypatch.setattr(cache, "store", failing)
    samples.put_many({index: {"x": np.arange(index + 1)} for index in (0, 1, 2, 6)})
    found = samples.get_many([0, 1, 2, 6])
    assert sorted(found) == [0, 2, 3]  # positions in the list asked: sample 1 alone is missing
    assert [found[position]["x"].tolist() for position in (0, 2, 3)] == [[0], [0, 1, 2], list(range(7))]
    assert "cannot cache prepared sample 1" in caplog.text
    delta = counters.take_delta()
    assert delta.keep_seconds > 0  # the batch's writes, charged to the budget
    assert delta.prepared_memory_bytes == cache.tiers[0].stored_bytes > 0  # published for the report


def test_a_batch_call_that_also_makes_samples_to_keep_is_charged_what_it_took_beyond_making_them(
        tmp_path: Path) -> None:
    """A JPEG kept is decoded whole beside its crop: the write budget pays what a keeping call
    takes beyond what calls that keep nothing take for as many samples (all of it before any has
    been seen)."""
    counters = SharedReadCounters()
    now = [0.0]
    budget = WriteBudget(bank_s=100.0, clock=lambda: now[0])
    samples = PreparedCache([chunked_tier("memory", tmp_path / "m")], counters, budget=budget).for_job(
        _index(tmp_path / "data"), "identity")
    samples.made(0.064, 64, 64)  # nothing learnt yet: all of it
    assert counters.take_delta().keep_seconds == pytest.approx(0.064)
    samples.made(0.032, 64, 0)  # 0.5 ms a sample when keeping none
    assert counters.take_delta().keep_seconds == 0
    samples.made(0.048, 64, 64)
    assert counters.take_delta().keep_seconds == pytest.approx(0.016)
    samples.made(0.030, 64, 64)  # faster than the learnt cost: nothing to charge
    assert counters.take_delta().keep_seconds == 0
    samples.made(0.064, 64, 0)  # 1 ms a sample: the learnt cost moves a tenth of the way, to 0.55 ms
    samples.made(0.0352 + 0.010, 64, 32)
    assert counters.take_delta().keep_seconds == pytest.approx(0.010)
    # Spent from the budget at the job's share (the cold one, 3%): 0.09 s so far is 3 s of the 100 s
    # banked, and 5 s more is the rest of it and more.
    assert budget.allows()
    samples.made(5.0, 64, 64)
    assert not budget.allows()


def test_a_rewritten_shard_is_a_different_key(tmp_path: Path) -> None:
    counters = SharedReadCounters()
    cache = PreparedCache([chunked_tier("memory", tmp_path / "m")], counters)
    index = _index(tmp_path / "data")
    samples = cache.for_job(index, "identity")
    samples.put(6, {"x": np.arange(3)})
    assert samples.get(6) is not None
    shard = index.shards[1]
    rewritten = DatasetIndex((index.shards[0], type(shard)(shard.url, shard.size, shard.num_rows,
                                                          shard.row_group_rows, shard.version + "-new")), index.schema)
    assert cache.for_job(rewritten, "identity").get(6) is None  # a new version is read again
    assert cache.for_job(index, "other prepare").get(6) is None  # so is another prepare spec
    delta = counters.take_delta()
    assert (delta.prepared_memory_hits, delta.prepared_misses) == (1, 2)
    assert delta.prepared_memory_bytes > 0


def test_the_prepare_identity_follows_transform_arguments_and_columns() -> None:
    image = build_transform("image", IMAGE_ARGS, ())
    base = prepare_identity("image", IMAGE_ARGS, ["image"], image)
    assert base == prepare_identity("image", dict(reversed(IMAGE_ARGS.items())), ["image"], image)
    assert base != prepare_identity("image", {**IMAGE_ARGS, "size": 32}, ["image"], image)
    assert base != prepare_identity("image", IMAGE_ARGS, ["image", "label"], image)
    # A transform without a cache_identity keeps the key it had before there was one: its cache stays warm.
    code = json.dumps(["image", IMAGE_ARGS, ["image"], prepared_cache.version("shardstream")], sort_keys=True)
    assert base == hashlib.sha256(code.encode()).hexdigest()[:32]
    image.cache_identity = {"file": "a"}  # type: ignore[union-attr]
    assert base != prepare_identity("image", IMAGE_ARGS, ["image"], image)


class _CountingReader:
    """A reader that records which rows it was asked for."""

    def __init__(self, reader: ShardReader) -> None:
        self.reader, self.asked = reader, []  # type: ignore[var-annotated]

    def read(self, indices: np.ndarray) -> pa.Table:
        self.asked += [int(i) for i in indices]
        return self.reader.read(indices)

    def rows(self, indices: np.ndarray) -> list[dict[str, Any]]:
        self.asked += [int(i) for i in indices]
        return self.reader.rows(indices)


def test_batches_are_the_same_bytes_cold_warm_and_without_the_cache(tmp_path: Path) -> None:
    index = _index(tmp_path / "data")
    job = DecodeJob.alone("j", index, transform="image", transform_args=IMAGE_ARGS, seed=5, on_corrupt="fail")
    transform = build_transform("image", IMAGE_ARGS, ())
    counters = SharedReadCounters()
    tiers = [chunked_tier("memory", tmp_path / "m"), chunked_tier("disk", tmp_path / "d")]
    samples = PreparedCache(tiers, counters).for_job(index, prepare_identity("image", IMAGE_ARGS, [], transform))
    indices = np.array([8, 1, 4, 0, 6], dtype=np.int64)
    for epoch in (0, 1):
        plain = decode_batch(job, memory_reader(index), transform, epoch, indices)
        reader = _CountingReader(memory_reader(index))
        cold_or_warm = decode_batch(job, reader, transform, epoch, indices, prepared_samples=samples)  # type: ignore[arg-type]
        for name in plain.arrays:
            np.testing.assert_array_equal(cold_or_warm.arrays[name], plain.arrays[name])
            assert cold_or_warm.arrays[name].dtype == plain.arrays[name].dtype
        assert reader.asked == (indices.tolist() if epoch == 0 else [])  # warm: nothing read, nothing decoded
    delta = counters.take_delta()
    assert (delta.prepared_misses, delta.prepared_memory_hits) == (5, 5)
    assert tiers[1].stored_bytes == 0  # each sample written once: the memory tier had room for all
    # A memory tier with room for two: the others go to the disk tier, and both serve the same bytes.
    third = samples._key(int(indices[2]))
    two = tiers[0].locate(third.folder, third.row)[1]  # type: ignore[index]  # the first two end there
    small = [chunked_tier("memory", tmp_path / "m2", two, chunk_bytes=two), chunked_tier("disk", tmp_path / "d2")]
    spilled = PreparedCache(small, counters).for_job(index, prepare_identity("image", IMAGE_ARGS, [], transform))
    decode_batch(job, memory_reader(index), transform, 0, indices, prepared_samples=spilled)
    again = decode_batch(job, _CountingReader(memory_reader(index)), transform, 1, indices,  # type: ignore[arg-type]
                         prepared_samples=spilled)
    np.testing.assert_array_equal(again.arrays["image"], plain.arrays["image"])
    delta = counters.take_delta()
    assert (delta.prepared_misses, delta.prepared_memory_hits, delta.prepared_disk_hits) == (5, 2, 3)


def _budget_spent(tmp_path: Path, shard_rows: tuple[int, ...]) -> tuple[Any, ...]:
    """(index, job, transform, clock, counters, cache, the job's samples): an image job whose node
    cache has just spent its write budget (4 s of time passing: its bank, at the cold share) on a
    clock the test moves (`clock[0]`)."""
    index = _index(tmp_path / "data", shard_rows)
    job = DecodeJob.alone("j", index, transform="image", transform_args=IMAGE_ARGS, seed=5, on_corrupt="fail")
    transform = build_transform("image", IMAGE_ARGS, ())
    clock = [0.0]
    counters = SharedReadCounters()
    budget = WriteBudget(bank_s=4.0, clock=lambda: clock[0])
    budget.spent(4.0 * MIN_SHARE)
    cache = PreparedCache([chunked_tier("memory", tmp_path / "m")], counters, budget=budget)
    return index, job, transform, clock, counters, cache, cache.for_job(
        index, prepare_identity("image", IMAGE_ARGS, [], transform))


def test_keeping_samples_takes_at_most_its_share_of_the_actors_time(tmp_path: Path) -> None:
    """Out of write budget, a prepared sample is not kept (counted as deferred) and is kept when it is
    prepared again once the budget has grown back; the batch is the same bytes either way."""
    index, job, transform, now, counters, cache, samples = _budget_spent(tmp_path, (5, 4))
    indices = np.array([3, 7], dtype=np.int64)
    plain = decode_batch(job, memory_reader(index), transform, 0, indices)
    spent = decode_batch(job, memory_reader(index), transform, 0, indices, prepared_samples=samples)
    np.testing.assert_array_equal(spent.arrays["image"], plain.arrays["image"])
    delta = counters.take_delta()
    assert (delta.prepared_misses, delta.prepared_deferred, cache.tiers[0].stored_bytes) == (2, 2, 0)
    assert delta.keep_seconds == 0
    now[0] += 1.0  # a second later: a second of time passing to spend at the cold share
    decode_batch(job, memory_reader(index), transform, 1, indices, prepared_samples=samples)
    delta = counters.take_delta()
    assert (delta.prepared_misses, delta.prepared_deferred) == (2, 0) and cache.tiers[0].stored_bytes > 0
    assert 0 < delta.keep_seconds < 1  # the time keeping them took, counted for the metric
    decode_batch(job, memory_reader(index), transform, 2, indices, prepared_samples=samples)
    assert counters.take_delta().prepared_memory_hits == 2


@pytest.mark.parametrize("batched", [True, False], ids=["one native call", "one sample at a time"])
def test_samples_the_cache_takes_are_kept_whole_and_the_others_made_in_their_rows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batched: bool) -> None:
    """Framed into a message: a JPEG the cache would not keep now (its write budget spent) is
    decoded straight into its row (counted as deferred once); one it keeps is decoded whole in the
    same pass, and kept; the message is the same bytes either way and reads back warm the same."""
    if not batched:
        one_sample_at_a_time(monkeypatch)
    wholes = native_crops(monkeypatch)
    index, job, transform, now, counters, cache, samples = _budget_spent(tmp_path, (8,))
    indices = np.array([1, 0, 3, 2, 4, 6], dtype=np.int64)  # 1 and 3 are PNGs, made the Python way
    expected = encode_batch(0, 0, 0, decode_batch(job, memory_reader(index), transform, 0, indices).arrays, indices)
    spent = decode_batch(job, memory_reader(index), transform, 0, indices, FrameHeader(0, 0, 0),
                         prepared_samples=samples)
    assert bytes(spent.message) == expected
    delta = counters.take_delta()
    assert (delta.prepared_misses, delta.prepared_deferred, cache.tiers[0].stored_bytes) == (6, 6, 0)
    assert wholes == [False] * 4
    now[0] += 10.0  # credit to keep them all
    kept = decode_batch(job, memory_reader(index), transform, 0, indices, FrameHeader(0, 0, 0), prepared_samples=samples)
    assert bytes(kept.message) == expected
    assert counters.take_delta().prepared_deferred == 0 and cache.tiers[0].stored_bytes > 0
    assert wholes == [False] * 4 + [True] * 4
    warm = decode_batch(job, memory_reader(index), transform, 0, indices, FrameHeader(0, 0, 0), prepared_samples=samples)
    assert bytes(warm.message) == expected and counters.take_delta().prepared_memory_hits == 6


def test_a_sample_kept_by_the_one_native_call_is_prepares_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the batch's native call keeps (the row's other values taken from its row group, the
    decoded image in the JPEG's place) is ``prepare(row)``: the same keys in the same order, the
    same values of the same types."""
    wholes = native_crops(monkeypatch)
    index, job, transform, now, _, _, samples = _budget_spent(tmp_path, (5, 6))
    now[0] += 10.0  # credit to keep them all
    indices = np.array([8, 0, 6, 2, 10], dtype=np.int64)  # JPEGs, from both shards' row groups
    decode_batch(job, memory_reader(index), transform, 0, indices, FrameHeader(0, 0, 0), prepared_samples=samples)
    assert wholes == [True] * 5
    for position, row in zip(indices.tolist(), memory_reader(index).rows(indices), strict=True):
        kept, expected = samples.get(position), transform.prepare(row)
        assert kept is not None and list(kept) == list(expected)
        np.testing.assert_array_equal(kept["image"], expected["image"])
        assert [(type(kept[key]), kept[key]) for key in ("label", "idx")] == \
            [(type(expected[key]), expected[key]) for key in ("label", "idx")]


def test_the_write_budget_grows_with_the_clock_and_banks_at_most_a_burst() -> None:
    now = [100.0]
    budget = WriteBudget(bank_s=10.0, clock=lambda: now[0])
    assert budget.allows()  # starts with a bank's worth: 10 s of time
    budget.spent(11 * MIN_SHARE)  # at the cold share: 11 s of time
    assert not budget.allows()  # a second in debt
    now[0] += 0.5
    assert not budget.allows()
    now[0] += 1.0
    assert budget.allows()
    now[0] += 3600.0  # an idle hour banks 10 s, not 3600 s
    budget.spent(10.5 * MIN_SHARE)
    assert not budget.allows()
    with pytest.raises(ValueError):
        WriteBudget(bank_s=0)


def test_a_job_that_reads_samples_kept_before_may_spend_most_of_the_time_on_writes() -> None:
    """Whatever the level of its hits: a second pass keeps what is left of the dataset however
    little the first kept."""
    assert share_for(0.0) == share_for(REUSE_HIT_RATE / 2) == MIN_SHARE
    assert share_for(REUSE_HIT_RATE) == share_for(0.05) == share_for(1.0) == MAX_SHARE
    now = [0.0]
    cold, warm = WriteBudget(bank_s=1.0, clock=lambda: now[0]), WriteBudget(bank_s=1.0, clock=lambda: now[0])
    assert cold.available(0.0) == warm.available(1.0) == float("inf")  # a full bank: waiting adds nothing
    cold.spent(0.1, hit_rate=0.0)  # over 3 s of time at the cold share
    warm.spent(0.1, hit_rate=REUSE_HIT_RATE)  # 0.11 s at 90%
    assert cold.available(0.0) == 0 and warm.available(1.0) == pytest.approx((1.0 - 0.1 / MAX_SHARE) * MAX_SHARE)
    now[0] += 0.5
    assert warm.allows() and not cold.allows()


def test_a_batch_keeps_only_what_the_write_budget_covers_already(tmp_path: Path) -> None:
    """Kept at the cold share, a batch would borrow its time from later ones, which would go on
    repaying it after the job's share has grown: it is kept only when the budget covers it at
    what keeping a sample has cost the job lately."""
    counters, now = SharedReadCounters(), [0.0]
    budget = WriteBudget(bank_s=1.0, clock=lambda: now[0])
    samples = PreparedCache([chunked_tier("memory", tmp_path / "m")], counters, budget=budget).for_job(
        _index(tmp_path / "data"), "identity")
    assert samples.keeps_now(64)  # nothing learnt yet: this batch teaches it
    samples.put_many({0: {"x": np.arange(3)}})
    samples._writing_s = 0.001  # as if writing a sample had cost 1 ms
    budget.spent(0.01)  # and the bank not full: 0.67 s of time, 20 ms of writing at the cold share
    counters.take_delta()
    assert not samples.keeps_now(64) and counters.take_delta().prepared_deferred == 64
    assert samples.keeps_now(15) and budget.available() > 0  # nothing borrowed


def test_a_write_that_claims_a_chunk_teaches_nothing_of_what_keeping_a_sample_costs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A job's first write claims its chunk: counted as what keeping a sample costs, it made a small
    job on an idle actor defer samples to its second epoch."""
    budget = WriteBudget(bank_s=100.0, clock=lambda: 0.0)
    tier = chunked_tier("memory", tmp_path / "m")
    samples = PreparedCache([tier], SharedReadCounters(), budget=budget).for_job(_index(tmp_path / "data"), "identity")
    claim = tier._claim

    def slow_claim(dataset: str, needed: int) -> Any:
        time.sleep(0.05)  # a chunk allocated on a busy machine
        return claim(dataset, needed)

    monkeypatch.setattr(tier, "_claim", slow_claim)
    samples.put_many({0: {"x": np.arange(3)}})  # 50 ms or more for one sample: 1.7 s of time at the cold share
    assert budget.available() < 3.0 - 0.05
    assert samples.keeps_now(64)  # not 64 x 50 ms
    samples.put_many({1: {"x": np.arange(3)}, 2: {"x": np.arange(3)}})  # into the chunk claimed: this one teaches
    assert not samples.keeps_now(4 * 10**6)


def test_a_service_may_keep_every_sample_a_first_epoch_prepares(tmp_path: Path) -> None:
    """prepared_cache_write_share: the first epoch's share, 1 to keep everything the first time; a
    job reading samples kept before may spend at least MAX_SHARE."""
    assert share_for(0.0, 1.0) == share_for(1.0, 1.0) == 1.0
    assert share_for(0.0, 0.2) == 0.2 and share_for(1.0, 0.2) == MAX_SHARE
    for wrong in (0.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="first_share"):
            WriteBudget(first_share=wrong)
    now = [0.0]
    budgets = [WriteBudget(bank_s=1.0, clock=lambda: now[0], first_share=share) for share in (MIN_SHARE, 1.0)]
    for budget in budgets:
        budget.spent(0.01)  # 10 ms of writing
    assert budgets[0].available() == pytest.approx((1.0 - 0.01 / MIN_SHARE) * MIN_SHARE)
    assert budgets[1].available() == pytest.approx(0.99)
    cache, _ = prepared_cache.open_prepared_cache(str(tmp_path / "m"), 1 << 26, "", 0, SharedReadCounters(),
                                                  write_share=0.5)
    assert cache is not None and cache.budget.first_share == 0.5


def test_a_job_that_found_samples_kept_before_keeps_the_full_share_as_its_hits_thin_out(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A second pass over a dataset of which a first epoch kept a few percent hits a few percent: its
    recent hit rate now and then falls below REUSE_HIT_RATE, and its share must not fall with it."""
    budget = WriteBudget(bank_s=100.0)
    samples = PreparedCache([chunked_tier("memory", tmp_path / "m")], SharedReadCounters(), budget=budget).for_job(
        _index(tmp_path / "data"), "identity")
    shares: list[float] = []
    monkeypatch.setattr(budget, "spent", lambda seconds, hit_rate=0.0: shares.append(share_for(hit_rate)))
    samples.put(0, {"x": np.arange(3)})
    assert not samples.reuses and shares == [MIN_SHARE]
    samples.get_many([0, 1, 2, 3])  # a quarter of them kept before
    assert samples.reuses
    for _ in range(60):
        samples.get_many([5, 6, 7, 8])
    assert samples.hit_rate < REUSE_HIT_RATE and samples.reuses
    samples.put(5, {"x": np.arange(3)})
    assert shares[-1] == MAX_SHARE


def test_a_jobs_hit_rate_follows_its_recent_lookups(tmp_path: Path) -> None:
    cache = PreparedCache([chunked_tier("memory", tmp_path / "m")], SharedReadCounters())
    samples = cache.for_job(_index(tmp_path / "data"), "identity")
    for i in range(4):
        samples.put(i, {"x": np.arange(3)})
    assert samples.hit_rate == 0.0
    for _ in range(30):
        samples.get_many([0, 1, 2, 3, 4, 5, 6, 7])  # half of them held
    assert samples.hit_rate == pytest.approx(0.5, abs=0.03)
    other = cache.for_job(_index(tmp_path / "data"), "another prepare")
    other.get_many([0, 1])
    assert other.hit_rate == 0.0  # a job's own, not the actor's


class _DirectPeers(PreparedPeers):
    """Peers whose calls go straight to the other node's cache in this process (the Ray calls
    are tested end to end in tests/integration/test_prepared_peers.py)."""

    def __init__(self, node_id: str, caches: dict[str, PreparedCache], reachable: bool = True) -> None:
        super().__init__(node_id)
        self.caches, self.reachable = caches, reachable
        self.set_nodes({"a": [], "b": []})  # the two nodes of these tests

    def fetch(self, wanted: dict[str, list[tuple[str, int]]]) -> dict[tuple[str, int], bytes]:
        if not self.reachable:
            return {}
        return {key: data for node, keys in wanted.items()
                for key, data in zip(keys, self.caches[node].read_files(keys), strict=True) if data is not None}

    def give(self, node: str, files: list[tuple[str, int, bytes]]) -> None:
        if self.reachable:
            self.caches[node].keep_files(files)


def test_a_node_finds_the_samples_it_lacks_at_their_home_and_keeps_only_its_own(tmp_path: Path) -> None:
    index = _index(tmp_path / "data", (20, 20))  # both nodes home to some: all but 2 in 2**40 layouts
    job = DecodeJob.alone("j", index, transform="image", transform_args=IMAGE_ARGS, seed=5, on_corrupt="fail")
    transform = build_transform("image", IMAGE_ARGS, ())
    identity = prepare_identity("image", IMAGE_ARGS, [], transform)
    counters = {node: SharedReadCounters() for node in "ab"}
    caches: dict[str, PreparedCache] = {}
    for node in "ab":
        caches[node] = PreparedCache([chunked_tier("disk", tmp_path / node)], counters[node],
                                     _DirectPeers(node, caches))
    indices = np.arange(index.num_rows, dtype=np.int64)
    plain = decode_batch(job, memory_reader(index), transform, 0, indices)
    made = decode_batch(job, memory_reader(index), transform, 0, indices,
                        prepared_samples=caches["a"].for_job(index, identity))
    np.testing.assert_array_equal(made.arrays["image"], plain.arrays["image"])
    held = {node: caches[node].tiers[0].held() for node in "ab"}
    assert held["a"] and held["b"] and not held["a"] & held["b"]  # each keeps its own, given by a
    assert len(held["a"] | held["b"]) == index.num_rows
    reader = _CountingReader(memory_reader(index))
    again = decode_batch(job, reader, transform, 1, indices,  # type: ignore[arg-type]
                         prepared_samples=caches["b"].for_job(index, identity))
    assert reader.asked == []  # every sample found: in b's tier, or at a
    np.testing.assert_array_equal(again.arrays["image"],
                                  decode_batch(job, memory_reader(index), transform, 1, indices).arrays["image"])
    delta = counters["b"].take_delta()
    assert (delta.prepared_disk_hits, delta.prepared_peer_hits, delta.prepared_misses) == (
        len(held["b"]), len(held["a"]), 0)


def test_a_home_that_does_not_answer_costs_a_prepare_here_not_the_batch(tmp_path: Path) -> None:
    index = _index(tmp_path / "data", (20, 20))
    job = DecodeJob.alone("j", index, transform="image", transform_args=IMAGE_ARGS, seed=5, on_corrupt="fail")
    transform = build_transform("image", IMAGE_ARGS, ())
    caches: dict[str, PreparedCache] = {}
    counters = SharedReadCounters()
    caches["a"] = PreparedCache([chunked_tier("disk", tmp_path / "a")], counters,
                                _DirectPeers("a", caches, reachable=False))
    caches["b"] = PreparedCache([chunked_tier("disk", tmp_path / "b")], SharedReadCounters())
    indices = np.arange(index.num_rows, dtype=np.int64)
    samples = caches["a"].for_job(index, prepare_identity("image", IMAGE_ARGS, [], transform))
    for epoch in (0, 1):
        made = decode_batch(job, memory_reader(index), transform, epoch, indices, prepared_samples=samples)
        np.testing.assert_array_equal(made.arrays["image"],
                                      decode_batch(job, memory_reader(index), transform, epoch, indices).arrays["image"])
    delta = counters.take_delta()
    assert delta.prepared_peer_hits == 0 and delta.prepared_misses > index.num_rows  # b's samples, twice


def test_a_job_keeps_no_more_than_its_limit_and_others_still_keep_theirs(tmp_path: Path) -> None:
    """job_max_cache_bytes: one job's samples beyond its bytes are prepared but not kept, so it
    cannot evict every other job's."""
    cache = PreparedCache([chunked_tier("memory", tmp_path / "m")], SharedReadCounters())
    index = _index(tmp_path / "data")
    sample = {"x": np.arange(1000, dtype=np.int64)}  # about 8,000 bytes each, with its key and header
    big = cache.for_job(index, "big job", max_bytes=20000)
    for i in range(5):
        big.put(i, sample)
    kept = [i for i in range(5) if big.get(i) is not None]
    assert kept == [0, 1] and 16000 <= big.kept_bytes <= 20000
    other = cache.for_job(index, "other job")  # no limit
    for i in range(5):
        other.put(i, sample)
    assert all(other.get(i) is not None for i in range(5))


def test_a_job_at_its_limit_is_asked_to_keep_no_more(tmp_path: Path) -> None:
    """Making a sample to keep costs work of its own (a JPEG decoded whole): a job at its bound
    is not asked to, and a sample a full tier refused does not count towards the bound."""
    cache = PreparedCache([chunked_tier("memory", tmp_path / "m", max_bytes=CHUNK, chunk_bytes=CHUNK)],
                          SharedReadCounters())
    index = _index(tmp_path / "data")
    sample = {"x": np.arange(1000, dtype=np.int64)}  # about 8,000 bytes each
    job = cache.for_job(index, "job", max_bytes=20000)
    assert job.keeps_now()
    for i in range(3):
        job.put(i, sample)
    assert [job.get(i) is not None for i in range(3)] == [True, True, False]
    assert not job.keeps_now()
    huge = {"x": np.zeros(CHUNK, np.uint8)}  # larger than a chunk: the tier refuses it
    other = cache.for_job(index, "other")
    other.put(0, huge)
    assert other.get(0) is None and other.kept_bytes == 0 and other.keeps_now()


def test_a_node_whose_tiers_are_full_is_asked_to_keep_nothing_until_it_tries_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A dataset larger than the cache: once every tier refuses for want of room, batches stop
    making samples to keep (nothing is counted as deferred: there is no room to defer them to),
    until the tier is tried again (FULL_RETRY_S later)."""
    counters = SharedReadCounters()
    tier = chunked_tier("memory", tmp_path / "m", max_bytes=2 * CHUNK, chunk_bytes=CHUNK)
    cache = PreparedCache([tier], counters)
    index = _index(tmp_path / "data", (9,))
    job = cache.for_job(index, "job")
    sample = {"x": np.zeros(400_000, np.uint8)}  # two fit in a 1 MiB chunk: four in the tier
    for i in range(5):
        assert job.keeps_now()
        job.put(i, sample)
    assert [job.get(i) is not None for i in range(5)] == [True] * 4 + [False]
    counters.take_delta()
    assert not job.keeps_now() and counters.take_delta().prepared_deferred == 0
    clock = [time.monotonic() + prepared_tier.FULL_RETRY_S]
    monkeypatch.setattr(prepared_tier.time, "monotonic", lambda: clock[0])
    assert job.keeps_now()  # tried again: another job's data may have been given back meanwhile


@pytest.mark.parametrize("batched", [True, False], ids=["one native call", "one sample at a time"])
def test_a_full_node_makes_no_whole_images_for_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         batched: bool) -> None:
    """A JPEG is decoded whole beside its crop only to be kept: with every tier full, a batch makes
    none (with write budget to spare), nothing is counted as deferred, and the message is the same."""
    if not batched:
        one_sample_at_a_time(monkeypatch)
    wholes = native_crops(monkeypatch)
    index, job, transform, now, counters, cache, samples = _budget_spent(tmp_path, (8,))
    now[0] += 10.0  # credit to keep them all
    indices = np.array([1, 0, 2, 4, 6], dtype=np.int64)  # 1 is a PNG (the loop's first sample sets the rows)
    expected = encode_batch(0, 0, 0, decode_batch(job, memory_reader(index), transform, 0, indices).arrays, indices)
    cache.tiers[0]._full_until = time.monotonic() + prepared_tier.FULL_RETRY_S  # as after a refusal for room
    counters.take_delta()
    full = decode_batch(job, memory_reader(index), transform, 0, indices, FrameHeader(0, 0, 0), prepared_samples=samples)
    assert bytes(full.message) == expected and wholes == [False] * 4
    delta = counters.take_delta()
    assert (delta.prepared_misses, delta.prepared_deferred, samples.kept_bytes) == (5, 0, 0)
    cache.tiers[0]._full_until = 0.0  # tried again
    decode_batch(job, memory_reader(index), transform, 0, indices, FrameHeader(0, 0, 0), prepared_samples=samples)
    assert wholes == [False] * 4 + [True] * 4 and samples.kept_bytes > 0


def test_threads_storing_and_loading_at_once_never_read_a_closed_file(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Peers' calls read and write a tier beside the decode thread: with room for two open chunks and two
    open indexes, files are closed all the time, never under a read or a write."""
    monkeypatch.setattr(sample_index, "OPEN_INDEXES", 2)
    tier = SampleTier("memory", str(tmp_path), max_bytes=64 * CHUNK, chunk_bytes=CHUNK)
    tier._chunks = ChunkCache(capacity=2)
    keys = [SampleKey(f"prepare {i % 8}", f"shard {i % 5}", i) for i in range(240)]

    def work(part: int) -> list[int]:
        labels = []
        for key in keys[part::4]:
            parts = encode_entry(key, {"x": np.full(500, key.row, np.int32), "label": key.row})
            assert parts is not None
            assert tier.store(key.folder, key.row, parts, sum(len(p) for p in parts))
            for earlier in keys[part:key.row + 1:4][-3:]:
                found = tier.load_file(earlier.folder, earlier.row)
                assert found is not None
                labels.append(decode_entry(found[0], earlier)["label"])
        return labels

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(work, range(4)))
    assert sum(len(r) for r in results) > 240 and all(isinstance(label, int) for r in results for label in r)
    assert tier.held() == {(key.folder, key.row) for key in keys}
    tier.close()


def test_a_dataset_starts_with_a_small_chunk_and_each_next_is_twice_the_last(tmp_path: Path) -> None:
    """A dataset of a few samples costs each actor a megabyte of the tier, not a whole chunk."""
    tier = SampleTier("memory", str(tmp_path), max_bytes=64 << 20, chunk_bytes=8 << 20)
    parts, size = _parts(300_000)
    for row in range(60):  # 3, 6, 13 and 27 fit the first four chunks
        assert tier.store("d/s", row, parts, size)
    sizes = sorted(entry.stat().st_size for entry in (tier.root / "d").iterdir() if entry.name.isdigit())
    assert sizes == [1 << 20, 2 << 20, 4 << 20, 8 << 20, 8 << 20]
    big, big_size = _parts(3_000_000)  # larger than the next chunk would be: the chunk is made to fit it
    assert tier.store("e/s", 0, big, big_size) and tier.load_file("e/s", 0) is not None
    tier.close()
