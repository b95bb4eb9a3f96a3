"""Order contract end to end: real service, real gRPC, real Ray decode actors.

Every rank's batch k holds exactly what DataLoader + DistributedSampler +
set_epoch(e) give it, with equal batch counts on all ranks.
"""

from __future__ import annotations

import glob
import math
import os
import threading
import time

import pytest
import torch

from shardstream.client import DatasetNotFound, RemoteLoader
from tests.datasets import oracle_batches, write_indexed

SHARDS = [7, 0, 1, 12, 5, 1, 0, 9]  # empty and single-row shards on purpose
N = sum(SHARDS)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> str:
    directory = str(tmp_path_factory.mktemp("indexed"))
    write_indexed(directory, SHARDS, row_group_size=3)
    return directory


def rank_batches(address: str, dataset: str, world: int, rank: int, epoch: int | None,
                 **kwargs: object) -> list[list[int]]:
    with RemoteLoader(address, dataset=dataset, rank=rank, world_size=world, **kwargs) as loader:
        if epoch is not None:
            loader.set_epoch(epoch)
        return [b["idx"].tolist() for b in loader]


@pytest.mark.parametrize(
    ("world", "batch", "shuffle", "drop_last", "seed", "epoch"),
    [
        (1, 4, False, False, 0, 0),
        (2, 4, True, False, 0, 0),
        (2, 5, True, True, 17, 3),
        (3, 2, True, False, 1, 1),
        (4, 7, False, True, 0, 2),
        (50, 1, True, False, 5, 0),  # N < W: padding wraps from the head
        (50, 2, True, True, 5, 0),   # N < W with drop_last: no batches at all
    ],
)
def test_every_rank_gets_distributed_sampler_batches(service_address: str, dataset: str, world: int,
                                                      batch: int, shuffle: bool, drop_last: bool,
                                                      seed: int, epoch: int) -> None:
    ranks = range(world) if world <= 4 else [0, 1, world - 1]
    counts = set()
    for rank in ranks:
        got = rank_batches(service_address, dataset, world, rank, epoch, batch_size=batch,
                           shuffle=shuffle, drop_last=drop_last, seed=seed)
        assert got == oracle_batches(N, world, rank, batch, shuffle, seed, drop_last, epoch)
        counts.add(len(got))
    assert len(counts) == 1


def test_columns_keep_dtype_and_shape(service_address: str, dataset: str) -> None:
    with RemoteLoader(service_address, dataset=dataset, batch_size=6, shuffle=False, world_size=1,
                      rank=0) as loader:
        batch = next(iter(loader))
    assert batch["idx"].dtype == torch.int64 and batch["idx"].shape == (6,)
    assert batch["y"].dtype == torch.int32 and batch["y"].tolist() == [i % 10 for i in range(6)]
    assert batch["x"].dtype == torch.float32 and batch["x"].shape == (6, 3)
    assert torch.equal(batch["x"][:, 1], batch["idx"].float())
    assert not batch["x"].is_pinned()  # no accelerator here: nothing is pinned


def test_columns_selects(service_address: str, dataset: str) -> None:
    with RemoteLoader(service_address, dataset=dataset, batch_size=4, columns=["y"], world_size=1,
                      rank=0) as loader:
        assert set(next(iter(loader))) == {"y"}


def test_forgotten_set_epoch_advances_the_epoch(service_address: str, dataset: str) -> None:
    with RemoteLoader(service_address, dataset=dataset, batch_size=4, shuffle=True, seed=3,
                      world_size=2, rank=1) as loader:
        first = [b["idx"].tolist() for b in loader]
        assert loader.epoch == 0
        second = [b["idx"].tolist() for b in loader]
        assert loader.epoch == 1
        loader.set_epoch(7)
        seventh = [b["idx"].tolist() for b in loader]
        assert loader.epoch == 7
    assert first == oracle_batches(N, 2, 1, 4, True, 3, False, 0)
    assert second == oracle_batches(N, 2, 1, 4, True, 3, False, 1)
    assert seventh == oracle_batches(N, 2, 1, 4, True, 3, False, 7)
    assert first != second


def test_an_iteration_that_fails_before_its_first_batch_does_not_use_up_its_epoch(
        service_address: str, tmp_path: object) -> None:
    data = f"{tmp_path}/data"
    write_indexed(data, [12, 8])
    with RemoteLoader(service_address, dataset=data, batch_size=4, seed=4, world_size=2, rank=0) as loader:
        # The shards vanish after the job was opened (their directory moved away: the files
        # themselves, and so their identities, stay as they were): the first batch fails.
        os.rename(data, f"{data}.away")
        with pytest.raises(DatasetNotFound, match="disappeared"):
            next(iter(loader))
        os.rename(f"{data}.away", data)
        retried = [b["idx"].tolist() for b in loader]
        assert loader.epoch == 0
        following = [b["idx"].tolist() for b in loader]
    assert retried == oracle_batches(20, 2, 0, 4, True, 4, False, 0)
    assert following == oracle_batches(20, 2, 0, 4, True, 4, False, 1)


def test_stats_count_what_arrived_and_the_time_the_loop_waited(service_address: str, dataset: str) -> None:
    with RemoteLoader(service_address, dataset=dataset, batch_size=4, world_size=2, rank=0,
                      columns=["idx", "x"]) as loader:
        started = time.perf_counter()
        got = []
        for batch in loader:
            got.append(batch)
            time.sleep(0.01)  # the "step": not waiting on the loader
        elapsed = time.perf_counter() - started
        assert loader.stats.batches == len(got) == len(loader)
        assert loader.stats.samples == sum(len(b["idx"]) for b in got) == math.ceil(N / 2)
        assert loader.stats.bytes == sum(t.numel() * t.element_size() for b in got for t in b.values())
        assert 0 < loader.stats.wait_seconds < elapsed - 0.01 * len(got)
        list(loader)  # totals run over epochs
        assert loader.stats.batches == 2 * len(loader)


def test_ranks_run_concurrently_and_never_wait_for_each_other(service_address: str, dataset: str) -> None:
    """Rank 0 finishes two whole epochs while rank 1 has not started."""
    results: dict[int, list[list[int]]] = {}

    def run(rank: int) -> None:
        results[rank] = rank_batches(service_address, dataset, 2, rank, 4, batch_size=3, seed=9)

    run(0)
    run(0)
    threads = [threading.Thread(target=run, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    for rank in (0, 1):
        assert results[rank] == oracle_batches(N, 2, rank, 3, True, 9, False, 4)


def test_len_matches_dataloader(service_address: str, dataset: str) -> None:
    with RemoteLoader(service_address, dataset=dataset, batch_size=4, drop_last=True, world_size=3,
                      rank=2) as loader:
        assert len(loader) == len(oracle_batches(N, 3, 2, 4, True, 0, True, 0))
        assert loader.num_samples == N


def test_breaking_out_mid_epoch_then_next_epoch(service_address: str, dataset: str) -> None:
    with RemoteLoader(service_address, dataset=dataset, batch_size=2, world_size=1, rank=0,
                      prefetch=2) as loader:
        for i, _ in enumerate(loader):
            if i == 1:
                break
        loader.set_epoch(1)
        full = [b["idx"].tolist() for b in loader]
    assert full == oracle_batches(N, 1, 0, 2, True, 0, False, 1)


def test_file_urls_and_lists_of_files(service_address: str, dataset: str) -> None:
    """file:// URLs and an unsorted list of files give the same sorted-path order."""

    files = sorted(glob.glob(f"{dataset}/*.parquet"))
    as_urls = [f"file://{path}" for path in reversed(files)]
    got = rank_batches(service_address, as_urls, 2, 1, 0, batch_size=4, seed=4)
    assert got == oracle_batches(N, 2, 1, 4, True, 4, False, 0)
