"""The block-shuffle order mode (plan.py): every sample once per epoch, deterministic from (seed,
epoch), the same global order at any world size, each block drawn from consecutive row groups of the
epoch's row-group order, and the exact mode's padding and equal batch counts."""

from __future__ import annotations

import numpy as np
import pytest

from shardstream.proto.errors import InvalidJobSpec
from shardstream.proto.job_options import JobOptions
from shardstream.service.plan import EpochPlan, SamplingSpec, block_shuffle

UNITS = (4, 4, 4, 3, 7, 1, 5, 4, 4, 4, 2, 6, 4, 4, 4, 4)  # rows per row group; 64 in all
N = sum(UNITS)


def spec(world: int = 1, batch: int = 4, block: int = 8, drop_last: bool = False, seed: int = 0) -> SamplingSpec:
    return SamplingSpec(N, world, batch, True, seed, drop_last, shuffle_block=block, unit_rows=UNITS)


def test_every_sample_once_an_epoch_and_epochs_differ() -> None:
    first, second = EpochPlan(spec(), 0).order, EpochPlan(spec(), 1).order
    assert sorted(first.tolist()) == list(range(N)) == sorted(second.tolist())
    assert first.tolist() != second.tolist()
    assert first.tolist() != list(range(N))
    assert EpochPlan(spec(), 0).order.tolist() == first.tolist()  # deterministic
    assert EpochPlan(spec(seed=1), 0).order.tolist() != first.tolist()


def test_each_row_group_lands_in_the_blocks_its_place_in_the_sequence_gives_it() -> None:
    """Locality: the samples of one block come from a run of consecutive row groups of the epoch's
    row-group order, so a row group's rows sit in the block(s) its run of the sequence covers."""
    block = 8
    order = block_shuffle(UNITS, block, seed=3)
    group_of = np.searchsorted(np.cumsum(UNITS), order, side="right")
    for group, rows in enumerate(UNITS):
        blocks = sorted({p // block for p in np.flatnonzero(group_of == group)})
        assert blocks == list(range(blocks[0], blocks[-1] + 1))  # neighbouring blocks only
        assert len(blocks) <= rows // block + 2  # as many as `rows` consecutive positions can touch


def test_samples_are_shuffled_within_a_block() -> None:
    order = block_shuffle((64,), 64, seed=0)  # one row group, one block: a permutation of it
    assert sorted(order.tolist()) == list(range(64)) and order.tolist() != list(range(64))


def test_the_global_order_is_the_same_at_any_world_size() -> None:
    """So resuming at another world size with the same global batch continues the same epoch."""
    orders = {w: EpochPlan(spec(world=w), 2).order for w in (1, 2, 4)}  # 64 divides by each
    assert orders[1].tolist() == orders[2].tolist() == orders[4].tolist()
    plan = EpochPlan(spec(world=4), 2)
    assert plan.rank_indices(1).tolist() == orders[1][1::4].tolist()


@pytest.mark.parametrize("drop_last", [False, True])
def test_padding_and_equal_batches_are_the_exact_modes(drop_last: bool) -> None:
    sampling = spec(world=7, batch=4, drop_last=drop_last)  # 64 samples over 7 ranks
    plan = EpochPlan(sampling, 0)
    lengths = {len(plan.rank_indices(r)) for r in range(7)}
    assert lengths == {sampling.samples_per_rank}
    counts = {sum(1 for s in range(sampling.batches_per_rank) if len(plan.batch_indices(r, s))) for r in range(7)}
    assert counts == {sampling.batches_per_rank}
    unpadded = block_shuffle(UNITS, 8, seed=0).tolist()
    if drop_last:  # 9 each: the last 1 dropped
        assert plan.order.tolist() == unpadded[:63]
    else:  # 10 each: 6 wrapped from the head, as DistributedSampler pads
        assert plan.order.tolist() == unpadded + unpadded[:6]


def test_job_spec_refuses_a_block_without_shuffle_and_keeps_exact_fingerprints() -> None:
    exact = JobOptions(dataset=("d",), batch_size=4, shuffle=True, seed=0, drop_last=False, world_size=2)
    blocked = JobOptions(dataset=("d",), batch_size=4, shuffle=True, seed=0, drop_last=False, world_size=2,
                      shuffle_block=1024)
    assert exact.fingerprint != blocked.fingerprint
    assert exact.fingerprint == "9289adf50c41f00e"  # options added later (shuffle_block, format, collate,
    # weights, ...) are absent from the message at their defaults, so they leave it alone
    with pytest.raises(InvalidJobSpec, match="set shuffle=True"):
        JobOptions(dataset=("d",), batch_size=4, shuffle=False, seed=0, drop_last=False, world_size=2,
                shuffle_block=8)
    with pytest.raises(InvalidJobSpec, match="shuffle_block must be >= 0"):
        JobOptions(dataset=("d",), batch_size=4, shuffle=True, seed=0, drop_last=False, world_size=2,
                shuffle_block=-1)
