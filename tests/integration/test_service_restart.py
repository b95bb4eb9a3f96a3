"""The service process dies mid-epoch and comes back: clients resume at their next batch.

Plans are pure functions of (job spec, dataset fingerprint, epoch), so the
restarted service rebuilds the same job from the client's OpenJob and the
stream continues exactly where it broke.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from shardstream.client import RemoteLoader
from tests.datasets import oracle_batches, write_indexed
from tests.processes import free_ports

START_DEADLINE_S = 120


def start_service(port: int, log_path: str) -> subprocess.Popen[bytes]:
    cli = os.path.join(os.path.dirname(sys.executable), "shardstream")
    port_file = f"{log_path}.port"
    if os.path.exists(port_file):
        os.remove(port_file)
    with open(log_path, "ab") as log:
        process = subprocess.Popen([cli, "serve", "--port", str(port), "--num-decoders", "1",
                                    "--port-file", port_file], stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)  # its own group: the whole Ray goes with it
    deadline = time.monotonic() + START_DEADLINE_S
    while not os.path.exists(port_file):
        assert process.poll() is None, open(log_path).read()[-3000:]
        assert time.monotonic() < deadline, "service did not start in time"
        time.sleep(0.2)
    return process


def kill_group(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait(timeout=30)


@pytest.mark.slow
def test_service_killed_and_restarted_mid_epoch(tmp_path: object) -> None:
    """With the whole Ray cluster (coordinator and decoders: one process group) killed and started
    again: the rank's decoders vanish with it."""
    data, log = f"{tmp_path}/data", f"{tmp_path}/serve.log"
    write_indexed(data, [60, 41])
    port = free_ports(1)[0]
    first = start_service(port, log)
    second = None
    try:
        got = []
        with RemoteLoader(f"127.0.0.1:{port}", dataset=data, batch_size=3, seed=1, world_size=2, rank=0,
                          prefetch=2, job_name="restart", reconnect_timeout=150) as loader:
            loader.set_epoch(4)
            for step, batch in enumerate(loader):
                got.append(batch["idx"].tolist())
                if step == 6:
                    kill_group(first)  # SIGKILL: no goodbye, the job registry is gone
                    second = start_service(port, log)
            lost = loader.stats.decoders_lost
        assert got == oracle_batches(101, 2, 0, 3, True, 1, False, 4)
        # It really went through a restart: the rank's decoders died with the cluster, and it
        # reopened the job, or found the new decoders first (it asks every 10 s).
        assert lost >= 1
    finally:
        kill_group(first)
        if second is not None:
            kill_group(second)
