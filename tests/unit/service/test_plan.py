"""EpochPlan against torch's own DistributedSampler + BatchSampler, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from shardstream.service.plan import EpochPlan, SamplingSpec
from tests.datasets import oracle_batches

specs = st.builds(
    SamplingSpec,
    num_samples_total=st.integers(1, 300),
    world_size=st.integers(1, 9),
    batch_size=st.integers(1, 40),
    shuffle=st.booleans(),
    seed=st.integers(0, 2**31),
    drop_last=st.booleans(),
)
epochs = st.integers(0, 1000)


def _oracle(s: SamplingSpec, rank: int, epoch: int) -> list[list[int]]:
    return oracle_batches(s.num_samples_total, s.world_size, rank, s.batch_size, s.shuffle,
                          s.seed, s.drop_last, epoch)


@settings(max_examples=200, deadline=None, database=None)
@given(spec=specs, epoch=epochs)
def test_plan_matches_distributed_sampler(spec: SamplingSpec, epoch: int) -> None:
    plan = EpochPlan(spec, epoch)
    for rank in range(spec.world_size):
        expected = _oracle(spec, rank, epoch)
        assert spec.batches_per_rank == len(expected), f"rank {rank}"
        got = [plan.batch_indices(rank, k).tolist() for k in range(spec.batches_per_rank)]
        assert got == expected, f"rank {rank}"


@settings(max_examples=100, deadline=None, database=None)
@given(spec=specs, epoch=epochs)
def test_every_rank_has_the_same_number_of_batches(spec: SamplingSpec, epoch: int) -> None:
    lengths = {len(_oracle(spec, rank, epoch)) for rank in range(spec.world_size)}
    assert lengths == {spec.batches_per_rank}
    plan = EpochPlan(spec, epoch)
    sizes = {len(plan.rank_indices(rank)) for rank in range(spec.world_size)}
    assert sizes == {spec.samples_per_rank}


@pytest.mark.parametrize(("n", "w", "drop_last", "per_rank"), [
    (1, 9, False, 1),   # N < W: padded by wrapping
    (1, 9, True, 0),    # N < W: every rank gets nothing
    (10, 3, True, 3),
    (10, 3, False, 4),
    (9, 3, True, 3),
])
def test_samples_per_rank_edge_cases(n: int, w: int, drop_last: bool, per_rank: int) -> None:
    spec = SamplingSpec(n, w, 2, shuffle=True, seed=1, drop_last=drop_last)
    assert spec.samples_per_rank == per_rank
    for rank in range(w):
        assert len(EpochPlan(spec, 0).rank_indices(rank)) == per_rank


def test_padding_wraps_from_the_head_when_n_is_smaller_than_world() -> None:
    spec = SamplingSpec(2, 5, 1, shuffle=False, seed=0, drop_last=False)
    plan = EpochPlan(spec, 0)
    assert [plan.batch_indices(r, 0).tolist() for r in range(5)] == [[0], [1], [0], [1], [0]]


@pytest.mark.parametrize("step", [-1, 3])
def test_step_outside_the_epoch_is_an_index_error(step: int) -> None:
    spec = SamplingSpec(12, 2, 2, shuffle=False, seed=0, drop_last=False)  # 3 batches per rank
    with pytest.raises(IndexError):
        EpochPlan(spec, 0).batch_indices(0, step)


@settings(max_examples=50, deadline=None, database=None)
@given(spec=specs, epoch=epochs)
def test_plan_is_pure(spec: SamplingSpec, epoch: int) -> None:
    a, b = EpochPlan(spec, epoch), EpochPlan(spec, epoch)
    # Ask b in reverse order so caching or call order could not hide a difference.
    for rank in reversed(range(spec.world_size)):
        for k in reversed(range(spec.batches_per_rank)):
            got = b.batch_indices(rank, k)
            assert got.dtype == np.int64
            np.testing.assert_array_equal(a.batch_indices(rank, k), got)
    np.testing.assert_array_equal(a.order, b.order)


def test_plan_does_not_touch_the_global_torch_rng() -> None:
    torch.manual_seed(123)
    before = torch.get_rng_state()
    EpochPlan(SamplingSpec(100, 2, 4, shuffle=True, seed=7, drop_last=False), 3).order  # noqa: B018
    assert torch.equal(before, torch.get_rng_state())


def test_shuffled_order_changes_with_epoch_and_seed() -> None:
    spec = SamplingSpec(200, 2, 8, shuffle=True, seed=5, drop_last=False)
    e0, e1 = EpochPlan(spec, 0).order, EpochPlan(spec, 1).order
    other_seed = EpochPlan(SamplingSpec(200, 2, 8, shuffle=True, seed=6, drop_last=False), 0).order
    assert not np.array_equal(e0, e1)
    assert not np.array_equal(e0, other_seed)
    assert sorted(e0.tolist()) == list(range(200))


def test_unshuffled_order_ignores_epoch() -> None:
    spec = SamplingSpec(50, 3, 4, shuffle=False, seed=5, drop_last=True)
    np.testing.assert_array_equal(EpochPlan(spec, 0).order, EpochPlan(spec, 9).order)
    np.testing.assert_array_equal(EpochPlan(spec, 0).order, np.arange(48))


@settings(max_examples=60, deadline=None, database=None)
@given(n=st.integers(1, 120), world=st.integers(1, 5), batch=st.integers(1, 9), window=st.integers(1, 4),
       drop_last=st.booleans(), epoch=st.integers(0, 3))
def test_bucketing_keeps_each_ranks_samples_and_batch_count(n: int, world: int, batch: int, window: int,
                                                            drop_last: bool, epoch: int) -> None:
    """The samples a rank gets in an epoch (DataLoader's, after drop_last) are the same with
    bucketing, in as many batches; only their grouping changes, and it is the same every time."""
    lengths = np.random.default_rng(n).integers(1, 50, n).astype("<i8")
    plain = SamplingSpec(n, world, batch, True, 3, drop_last)
    bucketed = SamplingSpec(n, world, batch, True, 3, drop_last, lengths=lengths.tobytes(), bucket_window=window)
    for rank in range(world):
        expected = [b for step in range(plain.batches_per_rank)
                    for b in EpochPlan(plain, epoch).batch_indices(rank, step).tolist()]
        batches = [EpochPlan(bucketed, epoch).batch_indices(rank, step).tolist()
                   for step in range(bucketed.batches_per_rank)]
        assert sorted(i for b in batches for i in b) == sorted(expected)
        assert batches == [EpochPlan(bucketed, epoch).batch_indices(rank, s).tolist()
                           for s in range(bucketed.batches_per_rank)]


def test_bucketing_groups_similar_lengths_and_saves_padding() -> None:
    """Within a window, a batch's lengths are a contiguous run of the sorted lengths: with
    lognormal lengths the padding a batch needs falls several-fold."""
    n, batch = 4096, 16
    lengths = np.maximum(1, np.random.default_rng(0).lognormal(5, 0.8, n)).astype("<i8")

    def padding(spec: SamplingSpec) -> float:
        plan = EpochPlan(spec, 0)
        pads = [int(lengths[b].max() * len(b) - lengths[b].sum())
                for b in (plan.batch_indices(0, s) for s in range(spec.batches_per_rank))]
        return sum(pads) / int(lengths.sum())

    plain = padding(SamplingSpec(n, 1, batch, True, 0, True))
    bucketed = padding(SamplingSpec(n, 1, batch, True, 0, True, lengths=lengths.tobytes(), bucket_window=64))
    assert bucketed < plain / 4, (plain, bucketed)
