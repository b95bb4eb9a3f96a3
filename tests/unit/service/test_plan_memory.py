"""A plan's memory does not grow with the world size: a rank's batches are read off the epoch's
N-long sequence, never off the padded order of samples_per_rank * W positions, and stay exactly
what the padded order (DistributedSampler's own way, kept here as the reference) gives."""

from __future__ import annotations

import time
import tracemalloc
from dataclasses import replace

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from shardstream.service.plan import EpochPlan, SamplingSpec, block_shuffle
from tests.datasets import oracle_batches

BIG_WORLD = 2**20


def padded_reference(s: SamplingSpec, epoch: int) -> np.ndarray:
    """The padded order made whole, as DistributedSampler makes it (and as plans once did)."""
    n = s.num_samples_total
    if s.weights:
        generator = torch.Generator()
        generator.manual_seed(s.seed + epoch)
        weights = torch.from_numpy(np.frombuffer(s.weights, dtype="<f8").copy())
        sequence = torch.multinomial(weights, n, replacement=True, generator=generator).numpy().astype(np.int64)
    elif s.shuffle and s.shuffle_block:
        sequence = block_shuffle(s.unit_rows, s.shuffle_block, s.seed + epoch)
    elif s.shuffle:
        generator = torch.Generator()
        generator.manual_seed(s.seed + epoch)
        sequence = torch.randperm(n, generator=generator).numpy().astype(np.int64)
    else:
        sequence = np.arange(n, dtype=np.int64)
    total = s.samples_per_rank * s.world_size
    return np.resize(sequence, total) if total > n else sequence[:total]


def test_a_million_ranks_over_ten_samples_is_quick_small_and_exact() -> None:
    spec = SamplingSpec(10, BIG_WORLD, 4, shuffle=True, seed=3, drop_last=False)
    EpochPlan(replace(spec, world_size=2), 1).batch_indices(0, 0)  # what it imports on first use
    tracemalloc.start()
    started = time.perf_counter()
    try:
        plan = EpochPlan(spec, 5)
        got = {rank: plan.batch_indices(rank, 0).tolist() for rank in (0, 1, 9, 10, 123_457, BIG_WORLD - 1)}
        elapsed = time.perf_counter() - started
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 256 * 1024, f"the plan held {peak} bytes at its peak"  # the padded order: 8 MiB
    assert elapsed < 1.0, elapsed
    for rank, batch in got.items():  # torch's own sampler (it makes the whole padded list itself)
        assert [batch] == oracle_batches(10, BIG_WORLD, rank, 4, True, 3, False, 5), rank


def test_bucketing_and_weights_at_a_big_world_hold_one_ranks_samples() -> None:
    lengths = np.arange(10, dtype="<i8")[::-1].copy()
    weights = np.linspace(1, 2, 10).astype("<f8")
    for spec in (SamplingSpec(10, BIG_WORLD, 2, True, 1, False, lengths=lengths.tobytes(), bucket_window=2),
                 SamplingSpec(10, BIG_WORLD, 2, True, 1, False, weights=weights.tobytes()),
                 SamplingSpec(10, BIG_WORLD, 2, True, 1, False, shuffle_block=4, unit_rows=(5, 5))):
        EpochPlan(replace(spec, world_size=2), 1).batch_indices(0, 0)  # what it imports on first use
        tracemalloc.start()
        try:
            plan = EpochPlan(spec, 0)
            batches = [plan.batch_indices(rank, 0).tolist() for rank in (0, BIG_WORLD - 1)]
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 256 * 1024, (spec, peak)
        assert all(len(b) == 1 for b in batches)


modes = st.sampled_from(["exact", "unshuffled", "weights", "block", "bucket"])


@settings(max_examples=150, deadline=None, database=None)
@given(n=st.integers(1, 60), world=st.integers(1, 130), batch=st.integers(1, 9), drop_last=st.booleans(),
       seed=st.integers(-(2**63), 2**63 - 1), epoch=st.integers(0, 2**31), mode=modes)
def test_every_mode_equals_the_padded_order(n: int, world: int, batch: int, drop_last: bool, seed: int,
                                            epoch: int, mode: str) -> None:
    """Rank r's samples are positions r, r + W, ... of the padded order, in every order mode; with
    bucketing they are that slice regrouped, as before."""
    rng = np.random.default_rng(n)
    units = tuple(int(u) for u in np.diff(np.unique(np.r_[0, rng.integers(1, n, 3), n]))) if n > 1 else (1,)
    extra = {"weights": {"weights": rng.random(n).astype("<f8").tobytes()},
             "block": {"shuffle_block": 4, "unit_rows": units},
             "bucket": {"lengths": rng.integers(1, 9, n).astype("<i8").tobytes(), "bucket_window": 2}}.get(mode, {})
    spec = SamplingSpec(n, world, batch, mode != "unshuffled", seed, drop_last, **extra)  # type: ignore[arg-type]
    plan = EpochPlan(spec, epoch)
    reference = padded_reference(spec, epoch)
    np.testing.assert_array_equal(plan.order, reference)
    for rank in {0, world - 1, world // 2}:
        mine = reference[rank::world]
        got = [plan.batch_indices(rank, k) for k in range(spec.batches_per_rank)]
        delivered = np.concatenate(got) if got else mine[:0]
        if mode == "bucket":
            assert sorted(delivered.tolist()) == sorted(mine[: len(delivered)].tolist())
        else:
            np.testing.assert_array_equal(delivered, mine[: len(delivered)])
        assert len(plan.rank_indices(rank)) == (len(delivered) if mode == "bucket" else spec.samples_per_rank)
