"""Real `torchrun` gloo jobs pulling their batches through a real service, with no job names."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest

from tests.datasets import oracle_batches, write_indexed
from tests.processes import free_ports

SHARDS = [10, 3, 0, 8]
VAL_SHARDS = [7, 6]
GLOBAL_BATCH = 6  # torchrun_worker.py's batch size x world size


def _torchrun(args: list[str], service_address: str, train: str, val: str, out: str,
              mode: str) -> subprocess.CompletedProcess[str]:
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    worker = os.path.join(os.path.dirname(__file__), "torchrun_worker.py")
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    env.pop("SHARDSTREAM_JOB_NAME", None)
    return subprocess.run([torchrun, *args, worker, service_address, train, val, out, mode],
                          env=env, capture_output=True, text=True, timeout=180)


def _record(out: str, mode: str, rank: int) -> dict:
    with open(f"{out}/{mode}-rank{rank}.json") as f:
        return json.load(f)  # type: ignore[no-any-return]


@pytest.fixture()
def datasets(tmp_path: object) -> tuple[str, str, str]:
    train, val, out = f"{tmp_path}/train", f"{tmp_path}/val", f"{tmp_path}/out"
    os.makedirs(out)
    write_indexed(train, SHARDS)
    write_indexed(val, VAL_SHARDS)
    return train, val, out


@pytest.mark.slow
def test_a_train_and_a_validation_loader_get_distributed_sampler_batches(
        service_address: str, datasets: tuple[str, str, str]) -> None:
    """Two loaders in one torchrun script (its run id shared by both) are two jobs, unnamed."""
    train, val, out = datasets
    result = _torchrun(["--standalone", "--nproc-per-node", "2"], service_address, train, val, out, "full")
    assert result.returncode == 0, result.stderr[-4000:]
    n, n_val = sum(SHARDS), sum(VAL_SHARDS)
    for rank in (0, 1):
        record = _record(out, "full", rank)
        assert record["world"] == 2
        assert record["steps_sum"] == 2 * record["len"]
        for epoch in (0, 1):
            assert record["epochs"][str(epoch)] == oracle_batches(n, 2, rank, 3, True, 11, False, epoch)
            assert record["epochs"][f"val{epoch}"] == oracle_batches(n_val, 2, rank, 5, False, 0, False, epoch)


@pytest.mark.slow
def test_a_restart_of_the_run_at_another_world_size_resumes_from_the_state(
        service_address: str, datasets: tuple[str, str, str]) -> None:
    """Same run id, 2 ranks then 1 (the same global batch): the loader's job at the new world
    size is another job, which load_state_dict continues where the first left off. 24 samples,
    so no padding tail differs between the world sizes (docs/reliability.md, elastic resume)."""
    _, val, out = datasets
    train = os.path.join(out, "even")
    write_indexed(train, [12, 12])
    run = ["--rdzv-backend", "c10d", "--rdzv-id", f"elastic-{uuid.uuid4().hex[:8]}"]
    saved = _torchrun([*run, "--rdzv-endpoint", f"127.0.0.1:{free_ports(1)[0]}", "--nproc-per-node", "2"],
                      service_address, train, val, out, "save")
    assert saved.returncode == 0, saved.stderr[-4000:]
    resumed = _torchrun([*run, "--rdzv-endpoint", f"127.0.0.1:{free_ports(1)[0]}", "--nproc-per-node", "1"],
                        service_address, train, val, out, "resume")
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    n = 24
    before = [oracle_batches(n, 2, rank, GLOBAL_BATCH // 2, True, 11, False, 0) for rank in (0, 1)]
    global_batches = [sorted(before[0][k] + before[1][k]) for k in range(len(before[0]))]
    saved_batches = [_record(out, "save", rank)["batches"] for rank in (0, 1)]
    assert [sorted(a + b) for a, b in zip(*saved_batches, strict=True)] == global_batches[:2]
    assert [sorted(b) for b in _record(out, "resume", 0)["batches"]] == global_batches[2:]


def test_the_same_loader_with_another_seed_on_one_rank_is_refused(service_address: str,
                                                                  datasets: tuple[str, str, str]) -> None:
    """Ranks of one run whose first loaders differ in seed: the same job, a real conflict."""
    train, _, _ = datasets
    script = ("import sys\nfrom shardstream.client import RemoteLoader\n"
              "RemoteLoader(sys.argv[1], dataset=sys.argv[2], batch_size=3, world_size=2, rank=int(sys.argv[3]),"
              " seed=int(sys.argv[4])).close()\n")
    env = {**os.environ, "TORCHELASTIC_RUN_ID": f"conflict-{uuid.uuid4().hex[:8]}",
           "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    env.pop("SHARDSTREAM_JOB_NAME", None)

    def rank(r: int, seed: int) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", script, service_address, train, str(r), str(seed)],
                              env=env, capture_output=True, text=True, timeout=120)

    assert rank(0, 1).returncode == 0
    refused = rank(1, 2)
    assert refused.returncode != 0
    assert "JobSpecConflict" in refused.stderr and "seed: 2 != 1" in refused.stderr, refused.stderr[-2000:]
