"""`shardstream serve` as a real process: embedded Ray, port file, a dataset prefix, status,
clean SIGTERM."""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from shardstream.client import DatasetNotAllowed, RemoteLoader
from tests.datasets import oracle_batches, write_indexed

START_DEADLINE_S = 90


def wait_for_port(port_file: str, process: subprocess.Popen[bytes]) -> int:
    deadline = time.monotonic() + START_DEADLINE_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"serve exited early with {process.returncode}")
        if os.path.exists(port_file) and open(port_file).read().strip():
            return int(open(port_file).read())
        time.sleep(0.2)
    raise AssertionError("serve did not write its port file in time")


@pytest.mark.slow
def test_serve_status_and_sigterm(tmp_path: object) -> None:
    data, port_file, log = f"{tmp_path}/data", f"{tmp_path}/port", f"{tmp_path}/serve.log"
    write_indexed(data, [6, 5])
    write_indexed(f"{tmp_path}/data-other", [3])
    cli = os.path.join(os.path.dirname(sys.executable), "shardstream")
    with open(log, "wb") as out:
        serve = subprocess.Popen([cli, "serve", "--port", "0", "--port-file", port_file, "--num-decoders", "1",
                                  "--allow-dataset-prefix", data, "--local-copy-dir", f"{tmp_path}/copy",
                                  "--local-copy-bytes", str(1 << 20)], stdout=out, stderr=subprocess.STDOUT)
    try:
        port = wait_for_port(port_file, serve)
        address = f"127.0.0.1:{port}"
        with RemoteLoader(address, dataset=data, batch_size=4, world_size=1, rank=0,
                          job_name="cli-test") as loader:
            assert [b["idx"].tolist() for b in loader] == oracle_batches(11, 1, 0, 4, True, 0, False, 0)
            fingerprint, pipeline = loader.manifest()["dataset"]["fingerprint"], loader.manifest()["pipeline"]["hash"]
        with pytest.raises(DatasetNotAllowed, match="data-other"):
            RemoteLoader(address, dataset=f"{tmp_path}/data-other", batch_size=4, world_size=1, rank=0)
        # The decode actors report what they served each second: status shows it once they have.
        deadline = time.monotonic() + 30
        while True:
            status = subprocess.run([cli, "status", address], capture_output=True, text=True, timeout=30)
            assert status.returncode == 0, status.stderr
            if "served 3 batches" in status.stdout or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert "1 decoder(s) on 1 node(s)" in status.stdout
        assert "'cli-test': 11 samples" in status.stdout and "served 3 batches" in status.stdout
        assert "from storage (4 row group(s)); hits: memory" in status.stdout, status.stdout
        assert f"parquet dataset {fingerprint}, pipeline {pipeline}" in status.stdout, status.stdout
        watched = subprocess.run([cli, "status", address, "--json", "--watch", "0.2", "--iterations", "2"],
                                 capture_output=True, text=True, timeout=30)
        assert watched.returncode == 0, watched.stderr
        snapshots = [json.loads(line) for line in watched.stdout.splitlines()]
        assert len(snapshots) == 2  # for scripts: one object per refresh
        [job] = [j for j in snapshots[-1]["jobs"] if j["job_name"] == "cli-test"]
        assert job["batches_served"] == "3" and snapshots[-1]["decoders"] == 1
        assert job["dataset_fingerprint"] == fingerprint and job["pipeline_hash"] == pipeline
        assert len(glob.glob(f"{tmp_path}/copy/*/*.arrow")) == 4  # the flags reach the decode actor
        serve.send_signal(signal.SIGTERM)
        assert serve.wait(timeout=60) == 0
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait()
    assert "shutting down" in open(log).read()


def test_status_of_a_dead_address_fails_clearly() -> None:
    cli = os.path.join(os.path.dirname(sys.executable), "shardstream")
    result = subprocess.run([cli, "status", "127.0.0.1:1"], capture_output=True, text=True, timeout=30)
    assert result.returncode == 1
    assert "127.0.0.1:1" in result.stderr
