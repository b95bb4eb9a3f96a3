"""The block-shuffle order mode end to end: ranks get the plan's batches through the service, every
sample once, equal batch counts, and it resumes from any point (tests/stateful.py) and elastically
like the exact mode."""

from __future__ import annotations

import pytest

from shardstream.client import InvalidJobSpec, OrderOptions, RemoteLoader
from shardstream.service.plan import EpochPlan, SamplingSpec
from tests.datasets import write_indexed
from tests.stateful import END, check_resumes, loader_passes

SHARDS = (30, 66)
N = sum(SHARDS)
# write_indexed's row groups of 4 rows: each shard ends with a shorter one
UNITS = (4,) * 7 + (2,) + (4,) * 16 + (2,)
BLOCK = 12


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> str:
    directory = str(tmp_path_factory.mktemp("order-modes"))
    write_indexed(directory, SHARDS)
    return directory


def plan_batches(world: int, rank: int, batch: int, epoch: int, seed: int = 5) -> list[list[int]]:
    sampling = SamplingSpec(N, world, batch, True, seed, False, shuffle_block=BLOCK, unit_rows=UNITS)
    plan = EpochPlan(sampling, epoch)
    return [plan.batch_indices(rank, s).tolist() for s in range(sampling.batches_per_rank)]


def loader(address: str, dataset: str, world: int, rank: int, batch: int, job: str) -> RemoteLoader:
    return RemoteLoader(address, dataset=dataset, batch_size=batch, seed=5, world_size=world, rank=rank,
                        shuffle_block=BLOCK, columns=["idx"], job_name=job)


def test_ranks_get_the_block_shuffled_plan_every_sample_once(service_address: str, dataset: str) -> None:
    per_rank = []
    for rank in range(3):
        with loader(service_address, dataset, 3, rank, 4, "blocks") as ranked:
            ranked.set_epoch(1)
            per_rank.append([b["idx"].tolist() for b in ranked])
    assert per_rank == [plan_batches(3, r, 4, 1) for r in range(3)]
    assert len({len(batches) for batches in per_rank}) == 1  # equal batch counts
    assert sorted(i for batches in per_rank for b in batches for i in b) == list(range(N))  # 96 = 3 x 32


def test_the_order_group_joins_the_job_its_flat_keyword_opened(service_address: str, dataset: str) -> None:
    with loader(service_address, dataset, 3, 0, 4, "blocks-grouped") as flat, \
            RemoteLoader(service_address, dataset=dataset, batch_size=4, seed=5, world_size=3, rank=1,
                         columns=["idx"], job_name="blocks-grouped", order=OrderOptions(shuffle_block=BLOCK)) as grouped:
        assert grouped.job.job_id == flat.job.job_id  # one spec, however it was spelled
        grouped.set_epoch(1)
        assert [b["idx"].tolist() for b in grouped] == plan_batches(3, 1, 4, 1)


def test_block_shuffle_resumes_at_any_point(service_address: str, dataset: str) -> None:
    """Fresh, mid-epoch, at the end of epoch 3 and into epoch 4 (12 batches a pass, then its end)."""
    def started_at_epoch_3() -> RemoteLoader:
        it = loader(service_address, dataset, 2, 1, 4, "blocks-resume")
        it.set_epoch(3)
        return it

    expected = [item for epoch in (3, 4)
                for item in [*((epoch, b) for b in plan_batches(2, 1, 4, epoch)), (END, epoch)]]
    check_resumes(started_at_epoch_3, lambda it: loader_passes(it, lambda b: b["idx"].tolist()), len(expected),
                  points=[0, 7, 13, 17], expected=expected)


def test_block_shuffle_resumes_at_another_world_size(service_address: str, dataset: str) -> None:
    with loader(service_address, dataset, 2, 0, 4, "blocks-w2") as first:
        first.set_epoch(3)
        it = iter(first)
        for _ in range(3):
            next(it)
        state = first.state_dict()
    resumed = []
    for rank in range(4):
        with loader(service_address, dataset, 4, rank, 2, "blocks-w4") as second:
            second.load_state_dict(state)
            resumed.append([b["idx"].tolist() for b in second])
    uninterrupted = [plan_batches(2, r, 4, 3) for r in range(2)]
    expected = [sorted(uninterrupted[0][k] + uninterrupted[1][k]) for k in range(3, len(uninterrupted[0]))]
    assert [sorted(i for r in range(4) for i in resumed[r][k]) for k in range(len(resumed[0]))] == expected


def test_a_block_without_shuffle_is_refused_by_name(service_address: str, dataset: str) -> None:
    with pytest.raises(InvalidJobSpec, match="shuffle_block"):
        RemoteLoader(service_address, dataset=dataset, batch_size=4, shuffle=False, shuffle_block=8,
                     world_size=1, rank=0, job_name="blocks-unshuffled")
