"""Hypothesis through the real service: shard layouts x sampler settings vs DistributedSampler."""

from __future__ import annotations

import shutil
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardstream.client import RemoteLoader
from tests.datasets import oracle_batches, write_indexed


@settings(max_examples=12, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    shards=st.lists(st.integers(0, 9), min_size=1, max_size=5).filter(lambda s: sum(s) > 0),
    world=st.integers(1, 6),
    batch=st.integers(1, 8),
    shuffle=st.booleans(),
    drop_last=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
    epoch=st.integers(0, 50),
    row_group=st.integers(1, 5),
)
def test_service_matches_distributed_sampler(service_address: str, shards: list[int], world: int, batch: int,
                                             shuffle: bool, drop_last: bool, seed: int, epoch: int,
                                             row_group: int) -> None:
    directory = tempfile.mkdtemp(prefix="shardstream-prop-")
    try:
        write_indexed(directory, shards, row_group_size=row_group)
        counts = set()
        for rank in range(world):
            with RemoteLoader(service_address, dataset=directory, batch_size=batch, shuffle=shuffle, seed=seed,
                              drop_last=drop_last, world_size=world, rank=rank, prefetch=3) as loader:
                loader.set_epoch(epoch)
                got = [b["idx"].tolist() for b in loader]
            assert got == oracle_batches(sum(shards), world, rank, batch, shuffle, seed, drop_last, epoch)
            counts.add(len(got))
        assert len(counts) == 1
    finally:
        shutil.rmtree(directory, ignore_errors=True)
