"""A shared service divides its decoders per job: a job with many ranks gets no more decoding than
one with few (unless weighted), a job may be held to some of the decoders and to a byte window,
and a priority class the service does not have is refused by name."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import grpc
import pytest

from shardstream.client import InvalidJobSpec, JobSpecConflict, RemoteLoader
from shardstream.proto.v1 import loader_pb2 as pb
from shardstream.proto.v1 import loader_pb2_grpc as pb_grpc
from shardstream.service.config import ServiceConfig
from shardstream.service.control.server import create_server
from tests.datasets import oracle_batches, write_indexed

ROWS = 4000
BATCH = 8
SLOW = {"transform": "tests.transforms:slow", "transform_args": {"delay_s": 0.002}}  # ~16 ms a batch
WARMUP_BATCHES = 30  # delivered before the window opens
WINDOW_BATCHES = 200  # the window the shares are measured over
WINDOW_TIMEOUT_S = 120.0


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> str:
    directory = str(tmp_path_factory.mktemp("fair") / "data")
    write_indexed(directory, [ROWS // 4] * 4, row_group_size=100)
    return directory


@pytest.fixture(scope="module")
def one_decoder(local_ray: None) -> Iterator[str]:
    """One decode actor, so every job's batches wait on the same decoding thread."""
    running, port = create_server(ServiceConfig(port=0, num_decoders=1, decoder_cpus=0.25,
                                                allowed_transform_modules=("tests.transforms",),
                                                priority_classes=("high=3",)))
    yield f"127.0.0.1:{port}"
    running.stop(grace=1.0)


@pytest.fixture(scope="module")
def limited(local_ray: None) -> Iterator[str]:
    running, port = create_server(ServiceConfig(port=0, num_decoders=2, decoder_cpus=0.25, job_max_decoders=1,
                                                job_max_in_flight_bytes=64 << 10))
    yield f"127.0.0.1:{port}"
    running.stop(grace=1.0)


def _shares(address: str, dataset: str, jobs: dict[str, tuple[int, str]]) -> dict[str, float]:
    """Every rank of every job (name -> (ranks, priority class)) pulls batches on a thread; each
    job's share of a window of WINDOW_BATCHES batches delivered once all are running (counted in
    batches, not seconds: a slow machine measures as many)."""
    counts = {name: 0 for name in jobs}
    lock, stop, started = threading.Lock(), threading.Event(), threading.Barrier(sum(r for r, _ in jobs.values()) + 1)
    window_full = threading.Event()
    start_total: list[int] = []  # the total delivered when the window opened
    before: dict[str, int] = {}  # each job's count then
    errors: list[BaseException] = []

    def rank(name: str, rank: int, world: int, priority: str) -> None:
        try:
            with RemoteLoader(address, dataset=dataset, batch_size=BATCH, world_size=world, rank=rank, job_name=name,
                              priority=priority, prefetch=2, **SLOW) as loader:  # type: ignore[arg-type]
                batches = iter(loader)
                next(batches)
                started.wait(timeout=120)
                while not stop.is_set():
                    next(batches)
                    with lock:
                        counts[name] += 1
                        total = sum(counts.values())
                        if not start_total and total >= WARMUP_BATCHES:  # every rank's streams are busy
                            start_total.append(total)
                            before.update(counts)
                        elif start_total and total - start_total[0] >= WINDOW_BATCHES:
                            window_full.set()
        except BaseException as exc:  # reported by the test
            errors.append(exc)
            started.abort()
            window_full.set()  # no need to wait for it

    threads = [threading.Thread(target=rank, args=(name, r, world, priority), daemon=True)
               for name, (world, priority) in jobs.items() for r in range(world)]
    for thread in threads:
        thread.start()
    started.wait(timeout=120)
    full = window_full.wait(timeout=WINDOW_TIMEOUT_S)
    assert full or errors, f"fewer than {WINDOW_BATCHES} batches in {WINDOW_TIMEOUT_S} s: {counts}"
    with lock:
        window = {name: counts[name] - before.get(name, 0) for name in counts}
    stop.set()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    total = sum(window.values())
    assert total >= WINDOW_BATCHES, window
    return {name: n / total for name, n in window.items()}


def test_a_job_of_one_rank_gets_as_much_as_a_job_of_six(one_decoder: str, dataset: str) -> None:
    """First come, first served would give the one-rank job a seventh of the decoder."""
    shares = _shares(one_decoder, dataset, {"wide": (6, ""), "narrow": (1, "")})
    assert shares["narrow"] > 0.35, shares


def test_a_priority_class_weights_the_share(one_decoder: str, dataset: str) -> None:
    shares = _shares(one_decoder, dataset, {"urgent": (1, "high"), "routine": (1, "default")})
    assert shares["urgent"] > 0.62, shares  # 0.75 at 3:1; 0.5 unweighted


def test_an_unknown_priority_class_is_refused_by_name(one_decoder: str, dataset: str) -> None:
    with pytest.raises(InvalidJobSpec, match=r"priority class 'gold' is not one of this service's: default, high"):
        RemoteLoader(one_decoder, dataset=dataset, batch_size=BATCH, world_size=1, rank=0, priority="gold")


def test_ranks_of_one_job_name_the_same_class(one_decoder: str, dataset: str) -> None:
    with RemoteLoader(one_decoder, dataset=dataset, batch_size=BATCH, world_size=2, rank=0, job_name="classes",
                      priority="high"):
        with pytest.raises(JobSpecConflict, match=r"rank 1 asks for priority class 'default', but job 'classes' "
                                                  r"is in 'high'"):
            RemoteLoader(one_decoder, dataset=dataset, batch_size=BATCH, world_size=2, rank=1, job_name="classes")
    status = _status(one_decoder)
    job = next(j for j in status.jobs if j.job_name == "classes")
    assert (job.priority, job.priority_weight) == ("high", 3.0)


def test_a_job_is_held_to_its_decoders_and_its_window(limited: str, dataset: str) -> None:
    with RemoteLoader(limited, dataset=dataset, batch_size=BATCH, world_size=4, rank=1, seed=3,
                      prefetch_bytes=1 << 20) as loader:
        assert len(loader.job.batch_servers) == 1  # of 2
        assert loader.window_bytes == (64 << 10) // 4  # the job's 64 KiB over 4 ranks, below the 1 MiB asked
        loader.set_epoch(1)
        got = [b["idx"].tolist() for b in loader]
    assert got == oracle_batches(ROWS, 4, 1, BATCH, True, 3, False, 1)


def _status(address: str) -> pb.ServiceStatus:
    with grpc.insecure_channel(address) as channel:
        return pb_grpc.LoaderStub(channel).GetStatus(pb.GetStatusRequest(), timeout=10)
