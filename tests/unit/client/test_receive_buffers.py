"""The rank's receive buffers (client/receive_buffers.py): reused only once nothing views them, never
more kept than the window allows, and a buffer the pool drops is unmapped."""

from __future__ import annotations

import gc
import mmap
import weakref

import numpy as np
import torch

from shardstream.client.receive_buffers import ReceiveBuffers, capacity

BATCH = 1 << 20


def _address(array: np.ndarray) -> int:
    return int(array.__array_interface__["data"][0])


def _batch(pool: ReceiveBuffers, value: int, size: int = BATCH) -> torch.Tensor:
    """A batch received into the pool, as the loader's tensors view it."""
    lease = pool.lease(size)
    lease[:] = value  # the kernel's recv_into
    return torch.frombuffer(memoryview(lease), dtype=torch.uint8)  # type: ignore[arg-type]


def _mapping(lease: np.ndarray) -> weakref.ref[mmap.mmap]:
    """The mapping a lease views (array -> buffer array -> memoryview -> mmap)."""
    owner = lease.base
    while not isinstance(owner, mmap.mmap):
        owner = owner.obj if isinstance(owner, memoryview) else owner.base
    return weakref.ref(owner)


def test_a_buffer_is_reused_only_once_nothing_views_it() -> None:
    pool = ReceiveBuffers(keep=4)
    first = pool.lease(1000)
    first_at = _address(first)
    tensor = torch.frombuffer(memoryview(first), dtype=torch.uint8)  # type: ignore[arg-type]
    del first
    gc.collect()
    second = pool.lease(1000)
    second_at = _address(second)
    assert second_at != first_at  # the tensor still views the first
    del tensor, second
    gc.collect()
    assert _address(pool.lease(900)) in {first_at, second_at}  # fits in a freed one
    assert pool.mapped == 2
    assert _address(pool.lease(100_000)) not in {first_at, second_at}  # fits in none: a new buffer
    assert pool.mapped == 3


def test_a_batch_the_loop_keeps_is_never_overwritten() -> None:
    """Every fifth batch is kept; the rest are dropped as a training loop drops them. Later batches,
    written into reused buffers, never touch a kept one's bytes."""
    pool = ReceiveBuffers(keep=3)
    kept: dict[int, torch.Tensor] = {}
    previous = None
    for step in range(60):
        batch = _batch(pool, step)
        if step % 5 == 0:
            kept[step] = batch
        previous = batch  # the loop variable, held while the next batch arrives
        del batch
    del previous
    for step, batch in kept.items():
        assert bool((batch == step).all()), f"batch {step} was overwritten"
    # the kept batches are the loop's memory; besides them the pool never mapped more than `keep`
    assert pool.mapped <= len(kept) + pool.keep


def test_a_steady_stream_reuses_the_windows_buffers() -> None:
    """Up to `keep` batches alive at once, over many batches: no buffer is mapped after the first
    `keep`, so no fresh page is faulted in per batch."""
    pool = ReceiveBuffers(keep=5)
    window: list[torch.Tensor] = []
    for step in range(200):
        window.append(_batch(pool, step % 256))
        if len(window) == pool.keep:
            window.pop(0)
        assert pool.leased <= pool.keep
    assert pool.mapped == pool.keep
    assert pool.leased + pool.free <= pool.keep


def test_the_pool_keeps_no_more_than_keep_buffers() -> None:
    """More batches alive at once than the window (a loop that keeps a few): once they are gone,
    the pool keeps `keep` buffers and unmaps the others."""
    pool = ReceiveBuffers(keep=3)
    leases = [pool.lease(BATCH) for _ in range(7)]
    mappings = [_mapping(lease) for lease in leases]
    del leases
    gc.collect()
    assert (pool.leased, pool.free) == (0, 3)
    assert sum(mapping() is not None for mapping in mappings) == 3  # the other four were unmapped


def test_a_larger_batch_replaces_the_smallest_free_buffer() -> None:
    pool = ReceiveBuffers(keep=2)
    small, large = pool.lease(BATCH), pool.lease(2 * BATCH)
    small_mapping, large_at = _mapping(small), _address(large)
    del small, large
    gc.collect()
    assert pool.free == 2
    larger = pool.lease(3 * BATCH)  # fits in neither: the smallest goes, the pool stays at two
    gc.collect()
    assert small_mapping() is None and pool.free == 1
    assert _address(pool.lease(BATCH)) == large_at  # the smallest free buffer that fits
    del larger


def test_close_unmaps_free_buffers_and_leased_ones_once_released() -> None:
    pool = ReceiveBuffers(keep=4)
    held, dropped = pool.lease(BATCH), pool.lease(BATCH)
    held_mapping, dropped_mapping = _mapping(held), _mapping(dropped)
    del dropped
    gc.collect()
    assert pool.free == 1
    pool.close()
    gc.collect()
    assert dropped_mapping() is None and held_mapping() is not None
    held[:] = 7  # still the caller's to use
    del held
    gc.collect()
    assert held_mapping() is None and pool.free == 0


def test_capacity_rounds_up_by_a_sixteenth_or_a_page() -> None:
    for size in (1, 4095, 4096, 4097, 300_000, 9_633_792, 3 * (1 << 30) + 1):
        mapped = capacity(size)
        assert size <= mapped < size + max(mmap.PAGESIZE, size // 16)
        assert mapped % mmap.PAGESIZE == 0
    # batches a little apart in size (variable-length samples) share a buffer
    assert capacity(9_633_792) >= 9_633_792 + 100_000
