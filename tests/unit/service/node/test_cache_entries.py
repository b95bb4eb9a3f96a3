"""Cache entries prove what they are: a prepared sample and a local-copy row group carry their key
and a checksum, and every kind of damage is a miss with its cause, counted, the entry dropped."""

from __future__ import annotations

import json
import os
import shutil
import struct
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from shardstream.service.dataset import DatasetIndex
from shardstream.service.formats import index_dataset
from shardstream.service.node import prepared_tier, sample_index
from shardstream.service.node.batching import decode_batch
from shardstream.service.node.cache_fault import CacheFault
from shardstream.service.node.local_copy import LocalCopy
from shardstream.service.node.prepared_cache import PreparedCache, prepare_identity
from shardstream.service.node.prepared_entry import (
    PREFIX,
    SampleKey,
    decode_entry,
    encode_entry,
    verify_file,
)
from shardstream.service.node.prepared_peers import PreparedPeers
from shardstream.service.node.prepared_tier import SampleTier
from shardstream.service.node.read_counters import SharedReadCounters
from shardstream.service.node.reader import RowGroupCache, RowGroupSource, ShardReader
from shardstream.service.node.storage_reader import StorageReader
from shardstream.service.node_messages import DecodeJob, ReadCounters
from shardstream.service.transforms import build_transform
from tests.cache_tiers import chunked_tier, overwrite, stored_entry
from tests.datasets import memory_reader, write_images, write_indexed

KEY = SampleKey("prepare", "file:///data/part-0.parquet\x00100\x00v1", 3)
SAMPLE = {"image": np.arange(2 * 4 * 3, dtype=np.uint8).reshape(2, 4, 3), "label": 7}


def _entry(key: SampleKey = KEY, sample: dict[str, Any] | None = None) -> bytearray:
    parts = encode_entry(key, sample or SAMPLE)
    assert parts is not None
    return bytearray(b"".join(bytes(p) for p in parts))


def _cause(data: bytearray, key: SampleKey = KEY) -> str:
    with pytest.raises(CacheFault) as caught:
        decode_entry(data, key)
    return caught.value.cause


def _retyped(data: bytearray, old: str, new: str) -> bytearray:
    """The entry with its header's dtype `old` edited to `new` (of the same size)."""
    start = PREFIX.size
    (length,) = struct.unpack_from("<I", data, 12)
    header = bytes(data[start:start + length])
    assert old.encode() in header and len(old) == len(new)
    return data[:start] + header.replace(old.encode(), new.encode()) + data[start + length:]


# ---------------------------------------------------------------- the prepared-sample entry

def test_an_entry_reads_back_as_its_sample_and_names_its_key() -> None:
    back = decode_entry(_entry(), KEY)
    np.testing.assert_array_equal(back["image"], SAMPLE["image"])
    assert back["image"].dtype == np.uint8 and type(back["label"]) is int and back["label"] == 7
    verify_file(_entry(), KEY.folder, KEY.row)


def test_each_kind_of_damage_is_refused_with_its_cause() -> None:
    data = _entry()
    flipped = bytearray(data)
    flipped[-5] ^= 0x01  # one bit of the picture
    assert _cause(flipped) == "checksum"
    assert _cause(_retyped(data, "|u1", "|i1")) == "checksum"  # another dtype of the same size
    assert _cause(data[:-7]) == "short_read"
    assert _cause(data[:10]) == "short_read"
    assert _cause(data + b"\0") == "format"
    assert _cause(bytearray(b"SSPREP1\n") + data[8:]) == "format"  # an older format, or no entry at all
    assert _cause(bytearray(b"garbage" * 8)) == "format"


def test_an_entry_of_another_key_is_refused() -> None:
    data = _entry()
    for other in (SampleKey(KEY.prepare, KEY.shard, 4),  # another row
                  SampleKey(KEY.prepare, KEY.shard.replace("v1", "v2"), 3),  # the shard rewritten
                  SampleKey("another prepare", KEY.shard, 3)):
        assert _cause(data, other) == "key"
    with pytest.raises(CacheFault, match="key"):
        verify_file(data, KEY.folder, 4)


# ---------------------------------------------------------------- a tier read through the cache

def _damage_file(path: Path, how: str, other: Path) -> None:
    if how == "flip":
        data = bytearray(path.read_bytes())
        data[-3] ^= 0xFF
        path.write_bytes(data)
    elif how == "copy":
        shutil.copyfile(other, path)
    elif how == "retype":
        path.write_bytes(_retyped(bytearray(path.read_bytes()), "|u1", "|i1"))
    elif how == "truncate":
        path.write_bytes(path.read_bytes()[:-100])
    elif how == "directory":
        path.unlink()
        (path / "inside").mkdir(parents=True)
    else:
        raise AssertionError(how)


def _damage_entry(tier: SampleTier, key: SampleKey, how: str, other: SampleKey) -> None:
    """Damage the entry of `key` where the tier stores it (the entry of `other` is stored after it)."""
    path, offset, entry = stored_entry(tier, key.folder, key.row)
    if how == "flip":
        overwrite(path, offset + len(entry) - 3, bytes([entry[-3] ^ 0xFF]))
    elif how == "copy":  # another sample's entry over this one's
        overwrite(path, offset, stored_entry(tier, other.folder, other.row)[2])
    elif how == "retype":
        overwrite(path, offset, bytes(_retyped(bytearray(entry), "|u1", "|i1")))
    elif how == "truncate":
        os.truncate(path, offset + len(entry) - 100)
    elif how == "directory":  # a directory where the chunk was
        os.unlink(path)
        os.makedirs(os.path.join(path, "inside"))
    else:
        raise AssertionError(how)


@pytest.mark.parametrize(("how", "cause"), [("flip", "checksum"), ("copy", "key"), ("retype", "checksum"),
                                            ("truncate", "short_read"), ("directory", "io_error")])
def test_a_damaged_stored_sample_is_a_miss_counted_and_dropped(tmp_path: Path, how: str, cause: str) -> None:
    index = _index(tmp_path / "data")
    counters = SharedReadCounters()
    tier = chunked_tier("disk", tmp_path / "tier")
    samples = PreparedCache([tier], counters).for_job(index, "prepare")
    for i in (0, 1):
        samples.put(i, {"image": np.full((8, 8, 3), i, np.uint8), "label": i})
    key, other = samples._key(0), samples._key(1)
    counters.take_delta()
    _damage_entry(tier, key, how, other)
    assert samples.get(0) is None  # a miss: prepared again from storage
    delta = counters.take_delta()
    assert delta.faults == {("disk", cause): 1} and delta.prepared_misses == 1
    assert tier.locate(key.folder, key.row) is None  # dropped
    samples.put(0, {"image": np.full((8, 8, 3), 0, np.uint8), "label": 0})
    again = samples.get(0)
    assert again is not None and again["label"] == 0 and int(again["image"].max()) == 0
    assert counters.take_delta().verified_bytes > 0


def test_a_batch_reads_each_run_of_close_rows_once_and_finds_what_one_by_one_finds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A shuffled batch's lookups: one read of a shard's index for each run of rows no more than
    GAP_ROWS apart; the same samples as one by one, in both tiers."""
    monkeypatch.setattr(sample_index, "GAP_ROWS", 1)
    index = _index(tmp_path / "data", (6, 4))
    memory, disk = chunked_tier("memory", tmp_path / "m"), chunked_tier("disk", tmp_path / "d")
    samples = PreparedCache([memory, disk], SharedReadCounters()).for_job(index, "prepare")
    for i, tier in ((1, memory), (2, disk), (7, disk), (8, memory), (0, memory)):
        key = samples._key(i)
        parts = encode_entry(key, {"image": np.full((2, 2, 3), i, np.uint8), "label": i})
        assert parts is not None and tier.store(key.folder, key.row, parts, sum(len(p) for p in parts))
    one_by_one = {i: samples.get(i) for i in range(10)}
    reads: list[tuple[int, int]] = []  # (first row, rows) of each read of an index
    real = os.pread
    monkeypatch.setattr(os, "pread", lambda fd, n, offset: reads.append((offset // 8, n // 8)) or real(fd, n, offset))
    found = samples.get_many([8, 2, 9, 1, 7, 0, 5])  # shard 1: rows 2, 3, 1; shard 0: rows 2, 1, 0, 5
    assert {p: s["label"] for p, s in found.items()} == {0: 8, 1: 2, 3: 1, 4: 7, 5: 0}
    assert {i: s["label"] for i, s in one_by_one.items() if s is not None} == {0: 0, 1: 1, 2: 2, 7: 7, 8: 8}
    # memory: shard 1's rows 1-3 in one read, shard 0's rows 0-2 and 5; disk, for what memory lacks:
    # shard 1's rows 1 and 3 (two apart), shard 0's rows 2 and 5
    assert sorted(reads) == sorted([(1, 3), (0, 3), (5, 1), (1, 1), (3, 1), (2, 1), (5, 1)])


@pytest.mark.parametrize("damaged", [None, 0, 1, 2, 3])
def test_entries_shorter_and_longer_than_the_first_read_come_back_whole_and_damage_is_each_ones_own(
        tmp_path: Path, damaged: int | None) -> None:
    """A batch's entries are read in one call each up to READ_AHEAD bytes, longer ones again whole:
    sizes around that bound come back as stored. One entry cut short (its chunk truncated inside
    it) or flipped is that entry's miss alone."""
    index = _index(tmp_path / "data", (6,))
    tier = chunked_tier("memory", tmp_path / "m")
    counters = SharedReadCounters()
    samples = PreparedCache([tier], counters).for_job(index, "prepare")
    lengths = [8, prepared_tier.READ_AHEAD // 8 - 12, prepared_tier.READ_AHEAD // 8, 50_000]
    stored = {}
    for row, n in enumerate(lengths):
        stored[row] = np.arange(n, dtype=np.int64) * (row + 1)
        samples.put(row, {"ids": stored[row]})
    sizes = [len(stored_entry(tier, samples._key(row).folder, row)[2]) for row in range(len(lengths))]
    assert sizes[0] < sizes[1] <= prepared_tier.READ_AHEAD < sizes[2] < sizes[3]
    if damaged is not None:
        path, offset, entry = stored_entry(tier, samples._key(damaged).folder, damaged)
        if damaged == len(lengths) - 1:  # the last entry of its chunk: the chunk cut inside it
            os.truncate(path, offset + len(entry) - 8)
        else:
            overwrite(path, offset + len(entry) - 1, bytes([entry[-1] ^ 0xFF]))
    counters.take_delta()
    rows = [3, 0, 2, 1]
    found = samples.get_many(rows)
    assert {rows[p] for p in found} == set(range(len(lengths))) - {damaged}
    for position, sample in found.items():
        np.testing.assert_array_equal(sample["ids"], stored[rows[position]])
    expected = {} if damaged is None else {("memory", "short_read" if damaged == 3 else "checksum"): 1}
    assert counters.take_delta().faults == expected


def test_a_batch_of_many_small_entries_holds_their_bytes_not_a_first_read_each(tmp_path: Path) -> None:
    """More entries than one read group, each far smaller than the first read: every one comes back,
    and what a sample's array keeps alive is its own entry's bytes, not the group's buffer."""
    count = prepared_tier.READ_GROUP + 5
    index = _index(tmp_path / "data", (count,))
    samples = PreparedCache([chunked_tier("memory", tmp_path / "m")], SharedReadCounters()).for_job(index, "prepare")
    for row in range(count):
        samples.put(row, {"ids": np.full(4, row, np.int64)})
    rows = list(range(count))[::-1]
    found = samples.get_many(rows)
    assert [found[p]["ids"].tolist() for p in range(count)] == [[row] * 4 for row in rows]
    assert max(_owner(found[p]["ids"]).nbytes for p in range(count)) < prepared_tier.READ_AHEAD // 4


def _owner(array: np.ndarray) -> np.ndarray:
    """The array that owns the memory `array` is a view of."""
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


def test_an_index_that_cannot_be_read_is_a_fault_for_each_sample_asked(tmp_path: Path) -> None:
    index = _index(tmp_path / "data")
    counters = SharedReadCounters()
    tier = chunked_tier("disk", tmp_path / "tier")
    samples = PreparedCache([tier], counters).for_job(index, "prepare")
    samples.put(0, {"image": np.zeros((2, 2, 3), np.uint8), "label": 0})
    samples.put(6, {"image": np.ones((2, 2, 3), np.uint8), "label": 6})  # the other shard's index is sound
    key = samples._key(0)
    tier.close()
    path = Path(tier.index.path(key.folder))
    path.unlink()
    path.mkdir()  # a directory where the index was
    counters.take_delta()
    found = samples.get_many([0, 6, 1, 2])  # both shards' indexes read at once: one fails, not the other
    assert list(found) == [1] and found[1]["label"] == 6
    delta = counters.take_delta()
    assert delta.faults == {("disk", "io_error"): 3} and delta.prepared_misses == 3


def test_fault_counts_travel_summed_per_cache_and_cause() -> None:
    total, report = ReadCounters(), ReadCounters(faults={("disk", "checksum"): 2})
    total.add(report)
    total.add(ReadCounters(faults={("disk", "checksum"): 1, ("peer", "key"): 1}))
    assert total.faults == {("disk", "checksum"): 3, ("peer", "key"): 1}
    assert report.faults == {("disk", "checksum"): 2}


# ---------------------------------------------------------------- samples from their home node

IMAGE_ARGS: dict[str, Any] = {"size": 16, "mode": "random_crop", "flip": True}


def _index(directory: Path, shard_rows: tuple[int, ...] = (5, 4)) -> DatasetIndex:
    write_images(str(directory), list(shard_rows))
    return index_dataset((str(directory),))


class _TamperingPeers(PreparedPeers):
    """Node "b" asking node "a" straight in this process; the files arrive damaged as `tamper` says."""

    def __init__(self, caches: dict[str, PreparedCache], tamper: str) -> None:
        super().__init__("b")
        self.caches, self.tamper = caches, tamper
        self.set_nodes({"a": [], "b": []})

    def fetch(self, wanted: dict[str, list[tuple[str, int]]]) -> dict[tuple[str, int], bytes]:
        found = {key: data for node, keys in wanted.items()
                 for key, data in zip(keys, self.caches[node].read_files(keys), strict=True) if data is not None}
        files = list(found.values())
        if self.tamper == "flip":
            return {key: data[:-1] + bytes([data[-1] ^ 1]) for key, data in found.items()}
        # "swap": every sample answered with another one's (sound) entry
        return {key: files[(i + 1) % len(files)] for i, key in enumerate(found)}

    def give(self, node: str, files: list[tuple[str, int, bytes]]) -> None:
        self.caches[node].keep_files(files)


@pytest.mark.parametrize(("tamper", "cause"), [("flip", "checksum"), ("swap", "key")])
def test_a_sample_from_its_home_that_fails_verification_is_prepared_here(tmp_path: Path, tamper: str,
                                                                         cause: str) -> None:
    index = _index(tmp_path / "data", (20, 20))
    job = DecodeJob.alone("j", index, transform="image", transform_args=IMAGE_ARGS, seed=5, on_corrupt="fail")
    transform = build_transform("image", IMAGE_ARGS, ())
    identity = prepare_identity("image", IMAGE_ARGS, [], transform)
    counters = SharedReadCounters()
    caches: dict[str, PreparedCache] = {"a": PreparedCache([chunked_tier("disk", tmp_path / "a")],
                                                           SharedReadCounters())}
    caches["b"] = PreparedCache([chunked_tier("disk", tmp_path / "b")], counters,
                                _TamperingPeers(caches, tamper))
    indices = np.arange(index.num_rows, dtype=np.int64)
    # Node a holds every sample (a's cache knows no peers, so it keeps all it prepares).
    decode_batch(job, memory_reader(index), transform, 0, indices, prepared_samples=caches["a"].for_job(index, identity))
    counters.take_delta()
    made = decode_batch(job, memory_reader(index), transform, 1, indices,
                        prepared_samples=caches["b"].for_job(index, identity))
    np.testing.assert_array_equal(made.arrays["image"],
                                  decode_batch(job, memory_reader(index), transform, 1, indices).arrays["image"])
    delta = counters.take_delta()
    samples_b = caches["b"].for_job(index, identity)
    peers = caches["b"].peers
    assert peers is not None
    keys = [samples_b._key(int(i)) for i in indices]
    at_a = sum(peers.home(key.folder, key.row) == "a" for key in keys)
    assert at_a > 0 and delta.prepared_peer_hits == 0 and delta.prepared_misses == len(indices)
    assert delta.faults == {("peer", cause): at_a}  # each sample a sent, refused and prepared here


def test_a_home_keeps_no_damaged_gift_and_sends_no_damaged_file(tmp_path: Path) -> None:
    counters = SharedReadCounters()
    tier = chunked_tier("disk", tmp_path / "a")
    cache = PreparedCache([tier], counters)
    good = bytes(_entry())
    damaged = good[:-1] + bytes([good[-1] ^ 1])
    cache.keep_files([(KEY.folder, KEY.row, damaged), (KEY.folder, 9, good)])  # the second: not row 9's
    assert tier.locate(KEY.folder, KEY.row) is None and tier.locate(KEY.folder, 9) is None
    assert counters.take_delta().faults == {("peer", "checksum"): 1, ("peer", "key"): 1}
    cache.keep_files([(KEY.folder, KEY.row, good)])
    path, offset, _ = stored_entry(tier, KEY.folder, KEY.row)
    overwrite(path, offset, damaged)
    assert cache.read_files([(KEY.folder, KEY.row)]) == [None]
    assert counters.take_delta().faults == {("disk", "checksum"): 1}


# ---------------------------------------------------------------- the local copy

SHARDS = [16, 8]


@pytest.fixture()
def rows(tmp_path: Path) -> DatasetIndex:
    write_indexed(str(tmp_path / "data"), SHARDS, row_group_size=8, features=16)
    return index_dataset((str(tmp_path / "data"),))


def _reader(index: DatasetIndex, directory: Path, counters: SharedReadCounters) -> ShardReader:
    local = LocalCopy(str(directory), 1 << 30, counters)
    return ShardReader(index, None, RowGroupSource(StorageReader(counters), RowGroupCache(0), local),
                       ThreadPoolExecutor(2))


def _copy_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*/*.arrow"))


@pytest.mark.parametrize(("how", "cause"), [("flip", "checksum"), ("copy", "key"), ("truncate", "short_read"),
                                            ("directory", "io_error"), ("header", "checksum")])
def test_a_damaged_row_group_in_the_copy_is_a_miss_fetched_again(rows: DatasetIndex, tmp_path: Path, how: str,
                                                                 cause: str) -> None:
    everything = np.arange(sum(SHARDS))
    expected = memory_reader(rows).read(everything)
    _reader(rows, tmp_path / "copy", SharedReadCounters()).read(everything)
    files = _copy_files(tmp_path / "copy")
    assert len(files) == 3
    for path in files:
        if how == "header":  # the key's row group edited in place: a sound-looking entry of another key
            data = path.read_bytes()
            (length,) = struct.unpack_from("<I", data, 12)
            header = json.loads(data[24:24 + length])
            edited = json.dumps({"key": [header["key"][0], 7 - header["key"][1], header["key"][2]]}).encode()
            path.write_bytes(data[:24] + edited.ljust(length) + data[24 + length:])
        else:
            _damage_file(path, how, files[(files.index(path) + 1) % len(files)])
    counters = SharedReadCounters()
    assert _reader(rows, tmp_path / "copy", counters).read(everything).equals(expected)
    delta = counters.take_delta()
    assert delta.faults == {("local_copy", cause): 3} and delta.storage_reads == 3
    assert all(path.is_file() for path in _copy_files(tmp_path / "copy"))  # stored again, sound
    sound = SharedReadCounters()
    assert _reader(rows, tmp_path / "copy", sound).read(everything).equals(expected)
    assert sound.take_delta().faults == {}


def test_a_mapped_row_group_replaced_on_disk_is_verified_again(rows: DatasetIndex, tmp_path: Path) -> None:
    counters = SharedReadCounters()
    local = LocalCopy(str(tmp_path / "copy"), 1 << 30, counters)
    local.touch_every_s = 0.0
    reader = ShardReader(rows, None, RowGroupSource(StorageReader(counters), RowGroupCache(0), local))
    expected = memory_reader(rows).read(np.arange(8))
    assert reader.read(np.arange(8)).equals(expected)
    [path] = _copy_files(tmp_path / "copy")
    damaged = bytearray(path.read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF
    temp = path.with_name("replacement")
    temp.write_bytes(damaged)
    os.replace(temp, path)  # a new file in its place, as most tools write one
    counters.take_delta()
    assert reader.read(np.arange(8)).equals(expected)
    assert counters.take_delta().faults == {("local_copy", "checksum"): 1}


def test_a_mapped_row_group_written_in_place_is_verified_again(rows: DatasetIndex, tmp_path: Path) -> None:
    """The actor's mapping shows the file's pages: a byte flipped in place must not reach a batch."""
    counters = SharedReadCounters()
    reader = _reader(rows, tmp_path / "copy", counters)
    expected = memory_reader(rows).read(np.arange(8))
    assert reader.read(np.arange(8)).equals(expected)
    [path] = _copy_files(tmp_path / "copy")
    before = path.stat()
    middle = before.st_size // 2  # in the row group's values
    with open(path, "r+b") as f:  # the same file (inode), as the mapping sees it
        f.seek(middle)
        byte = f.read(1)
        f.seek(middle)
        f.write(bytes([byte[0] ^ 0xFF]))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 10**9))  # a later mtime whatever the clock's grain
    counters.take_delta()
    assert reader.read(np.arange(8)).equals(expected)
    assert counters.take_delta().faults == {("local_copy", "checksum"): 1}
