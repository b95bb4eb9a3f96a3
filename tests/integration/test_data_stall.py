"""Starvation you can see: each rank's data stall travels with its wants to the decoders, and the
service shows it per job and rank in GetStatus, in /metrics and in `shardstream status`.

Two ranks of one job, fed by a deliberately slow decode (0.05 s per sample, a sleep, so a loaded
machine does not change it): rank 0 works 0.5 s per batch, far slower than its batches come, so
they are always ready (stall near 0); rank 1 does nothing but take batches, so it always waits
(stall near 1). The thresholds leave wide margins on both sides.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from shardstream.client import RemoteLoader
from shardstream.proto.v1 import loader_pb2 as pb
from shardstream.proto.v1 import loader_pb2_grpc as pb_grpc
from shardstream.service.control.server import Service
from tests.datasets import write_indexed

JOB = "stall-job"
WORLD, BATCH, STEPS = 2, 4, 24
WORK_S = 0.5  # rank 0's step time: batches decode far faster than it takes them
SLOW = {"delay_s": 0.05}  # per sample: 0.2 s a batch per decoder
REPORT_DEADLINE_S = 60


def _rank(address: str, data: str, rank: int, work_s: float, out: dict[int, Any]) -> None:
    try:
        with RemoteLoader(address, dataset=data, batch_size=BATCH, world_size=WORLD, rank=rank, job_name=JOB,
                          transform="tests.transforms:slow", transform_args=SLOW) as loader:
            taken = 0
            for _batch in loader:
                taken += 1
                time.sleep(work_s)
            out[rank] = (taken, loader.data_stall)
    except BaseException as exc:
        out[rank] = exc


def _job_status(address: str) -> pb.JobStatus | None:
    with grpc.insecure_channel(address) as channel:
        status = pb_grpc.LoaderStub(channel).GetStatus(pb.GetStatusRequest(), timeout=10)
    return next((job for job in status.jobs if job.job_name == JOB), None)


def _poll(read: Callable[[], Any], done: Callable[[Any], bool], what: str) -> Any:
    deadline = time.monotonic() + REPORT_DEADLINE_S
    while True:
        value = read()
        if done(value):
            return value
        assert time.monotonic() < deadline, f"{what} not reported within {REPORT_DEADLINE_S} s: {value}"
        time.sleep(0.25)


def _all_reported(job: pb.JobStatus | None) -> bool:
    """Both ranks' last batch sent and a stall heard from each (the actors report each second)."""
    return job is not None and len(job.ranks) == WORLD and all(
        r.position_batches == STEPS and r.HasField("data_stall") for r in job.ranks)


@pytest.fixture(scope="module")
def stalled_job(service: tuple[Service, str], tmp_path_factory: pytest.TempPathFactory) -> dict[int, Any]:
    """Both ranks run one epoch at once; what each loader saw, once the service has it all."""
    _, address = service
    data = str(tmp_path_factory.mktemp("stall") / "data")
    write_indexed(data, [WORLD * BATCH * STEPS // 2] * 2)
    out: dict[int, Any] = {}
    threads = [threading.Thread(target=_rank, args=(address, data, rank, work_s, out))
               for rank, work_s in ((0, WORK_S), (1, 0.0))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=240)
    for rank in range(WORLD):
        if isinstance(out.get(rank), BaseException):
            raise out[rank]
        assert out.get(rank, (0,))[0] == STEPS, f"rank {rank}: {out.get(rank)}"
    _poll(lambda: _job_status(address), _all_reported, "both ranks' stall")
    return out


def test_each_rank_sees_its_own_stall(stalled_job: dict[int, Any]) -> None:
    """The client's own number (loader.data_stall), the one its wants carry."""
    (_, sleeper), (_, hungry) = stalled_job[0], stalled_job[1]
    assert sleeper < 0.3, sleeper
    assert hungry > 0.5, hungry


def test_getstatus_has_each_ranks_position_rate_stall_and_lag(service: tuple[Service, str],
                                                               stalled_job: dict[int, Any]) -> None:
    _, address = service
    job = _job_status(address)
    assert job is not None
    sleeper, hungry = job.ranks  # by rank
    assert (sleeper.rank, hungry.rank) == (0, 1)
    for rank in (sleeper, hungry):
        assert (rank.epoch, rank.step, rank.position_batches, rank.lag_batches) == (0, STEPS - 1, STEPS, 0)
        assert 0.0 <= rank.batches_per_second < 100
    assert 0.0 <= sleeper.data_stall < 0.3 < 0.5 < hungry.data_stall <= 1.0
    # the value the rank last sent: at most what it had when its last want went out
    assert hungry.data_stall == pytest.approx(stalled_job[1][1], abs=0.3)


def _scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def test_metrics_export_each_ranks_stall_and_the_jobs_worst(service: tuple[Service, str],
                                                            stalled_job: dict[int, Any]) -> None:
    running, _ = service
    assert running.metrics_port
    metrics = _scrape(running.metrics_port)
    stall = {rank: metrics[("shardstream_rank_data_stall_ratio", (("job", JOB), ("rank", str(rank))))]
             for rank in range(WORLD)}
    assert 0.0 <= stall[0] < 0.3 and 0.5 < stall[1] <= 1.0, stall
    assert metrics[("shardstream_job_data_stall_ratio", (("job", JOB),))] == max(stall.values())
    assert metrics[("shardstream_rank_lag_batches", (("job", JOB), ("rank", "0")))] == 0


def test_status_watch_shows_the_rank_table_and_json_lines(service: tuple[Service, str],
                                                           stalled_job: dict[int, Any]) -> None:
    _, address = service
    cli = os.path.join(os.path.dirname(sys.executable), "shardstream")
    watched = subprocess.run([cli, "status", address, "--watch", "0.2", "--iterations", "2"],
                             capture_output=True, text=True, timeout=60)
    assert watched.returncode == 0, watched.stderr
    screens = watched.stdout.split(f"service {address}:")[1:]
    assert len(screens) == 2  # not a terminal: each refresh printed whole, no escape codes
    assert "\x1b[" not in watched.stdout
    for screen in screens:
        lines = screen.splitlines()
        start = next(i for i, line in enumerate(lines) if f"{JOB!r}" in line)
        assert lines[start + 2].startswith("    data stall: worst ") and "(rank 1)" in lines[start + 2]
        assert lines[start + 3].split() == ["rank", "epoch/step", "batches/s", "stall", "lag"]
        rows = [line.split() for line in lines[start + 4:start + 4 + WORLD]]
        assert [row[:2] for row in rows] == [["0", f"0/{STEPS - 1}"], ["1", f"0/{STEPS - 1}"]]
        stalls = [float(row[3].rstrip("%")) for row in rows]
        assert stalls[0] < 30 < 50 < stalls[1], rows
        assert [row[4] for row in rows] == ["0", "0"]

    as_json = subprocess.run([cli, "status", address, "--json", "--watch", "0.2", "--iterations", "2"],
                             capture_output=True, text=True, timeout=60)
    assert as_json.returncode == 0, as_json.stderr
    snapshots = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert len(snapshots) == 2  # one object per line, per refresh
    for snapshot in snapshots:
        [job] = [j for j in snapshot["jobs"] if j["job_name"] == JOB]
        ranks = {r["rank"]: r for r in job["ranks"]}  # rank 0 named too: zeros are printed
        assert set(ranks) == {0, 1}
        assert ranks[0]["data_stall"] < 0.3 < 0.5 < ranks[1]["data_stall"]
        assert ranks[1]["step"] == str(STEPS - 1) and ranks[1]["lag_batches"] == "0"
