"""A real `torchrun --nproc-per-node 2` gloo job pulling its batches through a real service."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.datasets import oracle_batches, write_indexed

SHARDS = [10, 3, 0, 8]


@pytest.mark.slow
def test_two_rank_torchrun_job_gets_distributed_sampler_batches(service_address: str, tmp_path: object) -> None:
    data, out = f"{tmp_path}/data", f"{tmp_path}/out"
    os.makedirs(out)
    write_indexed(data, SHARDS)
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    worker = os.path.join(os.path.dirname(__file__), "torchrun_worker.py")
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run(
        [torchrun, "--standalone", "--nproc-per-node", "2", worker, service_address, data, out],
        env=env, capture_output=True, text=True, timeout=180,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    n = sum(SHARDS)
    for rank in (0, 1):
        with open(f"{out}/rank{rank}.json") as f:
            record = json.load(f)
        assert record["world"] == 2
        assert record["steps_sum"] == 2 * record["len"]
        for epoch in (0, 1):
            assert record["epochs"][str(epoch)] == oracle_batches(n, 2, rank, 3, True, 11, False, epoch)
