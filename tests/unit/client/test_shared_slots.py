"""Shared-memory delivery, both ends in one process: a rank's slots, a decoder writing batches into them."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import numpy as np
import pytest

from shardstream.client.shared_slots import SlotPool, is_local_address
from shardstream.client.tensors import batch_to_tensors
from shardstream.proto.errors import StreamProtocolError
from shardstream.proto.wire import SharedRef, WireError, encode_batch, parse_batch
from shardstream.service.node.shared_slots import StreamSlots


def _write(slots: StreamSlots, name: str, step: int, values: np.ndarray) -> SharedRef:
    message = encode_batch(0, 1, step, {"x": values}, np.arange(len(values)), 0, slots.allocator(name))
    assert isinstance(message, SharedRef), "the batch went into a new bytes object, not the slot"
    return message


def test_a_batch_written_into_a_slot_reads_back_as_tensors_and_frees_the_slot_when_they_die(
        tmp_path: Path) -> None:
    pool, slots = SlotPool(str(tmp_path)), StreamSlots(str(tmp_path))
    name = pool.offer()
    assert os.listdir(tmp_path) == [name]
    values = np.arange(24, dtype=np.float32).reshape(6, 4)
    where = _write(slots, name, 7, values)
    assert os.listdir(tmp_path) == []  # the decoder removed the name: only the two descriptors reach it
    view = parse_batch(memoryview(pool.lease(where)))
    assert (view.epoch, view.rank, view.step) == (0, 1, 7)
    tensors = batch_to_tensors(view, pin=False)
    del view
    assert tensors["x"].numpy().tolist() == values.tolist()
    tensors["x"] += 1  # the rank's own memory, writable like any tensor's
    gc.collect()
    assert pool.offer() != name, "offered again while a tensor still views it"
    del tensors
    gc.collect()
    assert name in {pool.offer() for _ in range(2)}  # free again once the tensors are gone
    pool.close()
    slots.close()
    assert os.listdir(tmp_path) == []


def test_a_slot_grows_when_a_later_batch_is_larger(tmp_path: Path) -> None:
    pool, slots = SlotPool(str(tmp_path)), StreamSlots(str(tmp_path))
    name = pool.offer()
    small = parse_batch(memoryview(pool.lease(_write(slots, name, 0, np.zeros(4, np.int64)))))
    assert batch_to_tensors(small, False)["x"].tolist() == [0] * 4
    del small
    gc.collect()
    assert pool.offer() == name
    large = np.arange(100_000, dtype=np.int64)
    view = parse_batch(memoryview(pool.lease(_write(slots, name, 1, large))))
    assert batch_to_tensors(view, False)["x"].tolist() == large.tolist()
    pool.close()
    slots.close()


def test_a_slot_the_decoder_cannot_open_turns_the_stream_back_to_bytes(tmp_path: Path) -> None:
    """The rank's /dev/shm is not the decoder's (another host or container): the batch comes as bytes."""
    pool = SlotPool(str(tmp_path / "rank"))
    (tmp_path / "rank").mkdir()
    slots = StreamSlots(str(tmp_path / "decoder"))
    name = pool.offer()
    message = encode_batch(0, 0, 0, {"x": np.arange(3)}, np.arange(3), 0, slots.allocator(name))
    assert isinstance(message, bytes) and not slots.usable
    assert parse_batch(message).shared is None
    pool.declined(name)
    assert pool.offer() == "" and os.listdir(tmp_path / "rank") == []


def test_only_slot_names_are_opened(tmp_path: Path) -> None:
    (tmp_path / "secret").write_bytes(b"keys")
    slots = StreamSlots(str(tmp_path))
    for name in ("secret", "../secret", "shardstream-slot-1-" + "0" * 31 + "/", "shardstream-slot-x-" + "0" * 32):
        with pytest.raises(StreamProtocolError, match="not a slot name"):
            slots.allocator(name)
    assert (tmp_path / "secret").read_bytes() == b"keys"


def test_a_rank_refuses_a_slot_it_did_not_offer_or_one_smaller_than_claimed(tmp_path: Path) -> None:
    pool, slots = SlotPool(str(tmp_path)), StreamSlots(str(tmp_path))
    with pytest.raises(WireError, match="did not offer"):
        pool.lease(SharedRef("shardstream-slot-1-" + "0" * 32, 10))
    where = _write(slots, pool.offer(), 0, np.zeros(8, np.uint8))
    with pytest.raises(WireError, match="holds"):
        pool.lease(SharedRef(where.slot, where.size + 4096))
    pool.close()
    slots.close()


def test_local_addresses_are_loopback_and_this_hosts_own() -> None:
    assert is_local_address("127.0.0.1:5000") and is_local_address("localhost:1") and is_local_address("[::1]:2")
    assert not is_local_address("192.0.2.1:5000")  # TEST-NET-1: no interface here holds it
    assert not is_local_address("decoder.example.invalid:5000")


def test_a_rank_that_cannot_make_slots_stops_offering_them(tmp_path: Path) -> None:
    pool = SlotPool(str(tmp_path / "missing"))  # /dev/shm full or gone
    assert pool.offer() == "" and not pool.offering


def test_a_slot_that_cannot_grow_sends_the_batch_on_the_stream(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Room the slot's filesystem does not have is refused when the slot grows (fallocate), where
    writing through the mapping would kill the decoder (SIGBUS); that batch goes as bytes."""
    from shardstream.service.node import shared_slots as decoder_side

    pool, slots = SlotPool(str(tmp_path)), StreamSlots(str(tmp_path))
    allocate = slots.allocator(pool.offer())
    assert isinstance(allocate(16)[0], SharedRef)
    monkeypatch.setattr(decoder_side, "writable_bytes", lambda size: (b"on the stream", np.zeros(1, np.uint8)))
    assert allocate(1 << 62)[0] == b"on the stream"
    assert isinstance(allocate(32)[0], SharedRef)  # the next batch that fits goes into the slot again
