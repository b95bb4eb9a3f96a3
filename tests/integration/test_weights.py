"""Weighted sampling against its oracle: WeightedRandomSampler's draw, split as DistributedSampler splits,
and resumed from any point (tests/stateful.py)."""

from __future__ import annotations

import math
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from shardstream.client import InvalidJobSpec, RemoteLoader
from tests.datasets import oracle_batches
from tests.stateful import END, check_resumes, loader_passes

N = 37
WEIGHTS = [0.0 if i % 5 == 0 else float(1 + i % 3) for i in range(N)]  # some never drawn


@pytest.fixture(scope="module")
def weighted(tmp_path_factory: pytest.TempPathFactory) -> str:
    directory = tmp_path_factory.mktemp("weighted")
    for part, rows in enumerate([range(0, 16), range(16, N)]):
        pq.write_table(pa.table({"idx": pa.array(list(rows), pa.int64()),
                                 "w": pa.array([WEIGHTS[i] for i in rows], pa.float32())}),
                       directory / f"part-{part}.parquet", row_group_size=6)
    return str(directory)


def oracle(world: int, rank: int, batch: int, seed: int, drop_last: bool, epoch: int) -> list[list[int]]:
    """torch.multinomial(weights, N, replacement=True, generator=seed + epoch) (WeightedRandomSampler's
    draw), padded by wrapping and split rank::world as DistributedSampler does, in batches."""
    generator = torch.Generator().manual_seed(seed + epoch)
    drawn = torch.multinomial(torch.tensor(WEIGHTS, dtype=torch.double), N, True, generator=generator).tolist()
    per_rank = math.ceil((N - world) / world) if drop_last and N % world else math.ceil(N / world)
    total = per_rank * world
    padded = (drawn * math.ceil(total / N))[:total]
    mine = padded[rank:total:world]
    batches = [mine[i:i + batch] for i in range(0, len(mine), batch)]
    return [b for b in batches if len(b) == batch] if drop_last else batches


def test_the_oracle_is_weighted_random_samplers_draw() -> None:
    from torch.utils.data import WeightedRandomSampler

    sampler = WeightedRandomSampler(WEIGHTS, N, replacement=True, generator=torch.Generator().manual_seed(9))
    assert oracle(1, 0, N, 9, False, 0) == [list(sampler)]  # one batch of all N draws


@pytest.mark.parametrize(("world", "drop_last"), [(1, False), (3, False), (3, True), (4, True)])
def test_every_rank_gets_the_weighted_draw_split_as_distributed_sampler_splits(
        service_address: str, weighted: str, world: int, drop_last: bool) -> None:
    for rank in range(world):
        with RemoteLoader(service_address, dataset=weighted, batch_size=4, world_size=world, rank=rank, seed=11,
                          drop_last=drop_last, weights="w", columns=["idx"]) as loader:
            for epoch in (0, 1):
                loader.set_epoch(epoch)
                got = [b["idx"].tolist() for b in loader]
                assert got == oracle(world, rank, 4, 11, drop_last, epoch)
                assert not any(WEIGHTS[i] == 0 for batch in got for i in batch)
            assert len(loader) == len(oracle_batches(N, world, rank, 4, True, 11, drop_last, 0))  # equal counts


def test_weighted_sampling_resumes_at_any_point(service_address: str, weighted: str) -> None:
    """Fresh, mid-epoch, at the end of epoch 2 and into epoch 3 (4 batches a pass on rank 1 of 3)."""
    def started_at_epoch_2() -> RemoteLoader:
        it = RemoteLoader(service_address, dataset=weighted, batch_size=4, world_size=3, rank=1, seed=11,
                          weights="w", columns=["idx"], job_name="weighted-resume")
        it.set_epoch(2)
        return it

    expected = [item for epoch in (2, 3) for item in [*((epoch, b) for b in oracle(3, 1, 4, 11, False, epoch)),
                                                       (END, epoch)]]
    check_resumes(started_at_epoch_2, lambda it: loader_passes(it, lambda b: b["idx"].tolist()), len(expected),
                  points=[0, 2, 5, 7], expected=expected)


def test_a_negative_weight_is_refused_naming_the_sample(service_address: str, weighted: str,
                                                        tmp_path: object) -> None:
    bad = f"{tmp_path}/bad"
    os.makedirs(bad)
    pq.write_table(pa.table({"idx": [0, 1, 2], "w": [1.0, -0.5, 2.0]}), f"{bad}/part.parquet")
    with pytest.raises(InvalidJobSpec, match=r"weight -0\.5 of sample 1 \(row 1 of .*part\.parquet\) is negative"):
        RemoteLoader(service_address, dataset=bad, batch_size=2, world_size=1, rank=0, weights="w")
    with pytest.raises(InvalidJobSpec, match="weights column 'nope' is not in the dataset"):
        RemoteLoader(service_address, dataset=weighted, batch_size=2, world_size=1, rank=0, weights="nope")
    with RemoteLoader(service_address, dataset=weighted, batch_size=8, world_size=1, rank=0, seed=1,
                      columns=["idx"]) as loader:  # the service serves on
        assert [b["idx"].tolist() for b in loader] == oracle_batches(N, 1, 0, 8, True, 1, False, 0)
