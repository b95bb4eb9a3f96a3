"""Decode capacity from Ray's own autoscaler: a `ray start --head --autoscaling-config` cluster
whose node provider is Ray's fake multi-node one (each node it launches is a real raylet on this
machine), with no decode node at first and room for three.

`shardstream serve --autoscale-max-decoders 3` asks the autoscaler for one decode unit; a rank
starved by a slow transform makes it ask for more, the autoscaler launches nodes, decoders start
on them and every epoch stays exact. When the rank stops, the service drains the surplus decoders
and lowers its request, and the autoscaler removes the idle nodes. Every process is ended by its
process group and environment marker (tests/processes.py), never by `ray stop`.
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from shardstream.client import RemoteLoader
from shardstream.proto.v1 import loader_pb2 as pb
from shardstream.proto.v1 import loader_pb2_grpc as pb_grpc
from tests.datasets import oracle_batches, write_indexed
from tests.processes import BIN, Hosts, free_ports, tail, wait_until

NODE_STORE = 80 * 2**20
ROWS = [120, 120]
BATCH = 4
SLOW = {"transform": "tests.transforms:slow", "transform_args": {"delay_s": 0.01}}


def _autoscaling_config(gcs_address: str) -> dict[str, object]:
    """The fake multi-node provider's cluster: a head with no CPUs (the service's driver), and
    decode nodes of one CPU and one `decode` unit, 0 to 3 of them, removed after 3 s idle."""
    no_commands: dict[str, list[str]] = {key: [] for key in (
        "initialization_commands", "setup_commands", "head_setup_commands", "worker_setup_commands",
        "head_start_ray_commands", "worker_start_ray_commands", "cluster_synced_files")}
    return {
        "cluster_name": "shardstream-test", "max_workers": 3, "idle_timeout_minutes": 0.05, "upscaling_speed": 10,
        "provider": {"type": "fake_multinode", "gcs_address": gcs_address, "use_node_id_as_ip": True,
                     "disable_node_updaters": True, "disable_launch_config_check": True},
        "available_node_types": {
            "ray.head.default": {"resources": {"CPU": 0}, "node_config": {}, "max_workers": 0},
            "decode": {"resources": {"CPU": 1, "decode": 1, "object_store_memory": NODE_STORE}, "node_config": {},
                       "min_workers": 0, "max_workers": 3},
        },
        "head_node_type": "ray.head.default", "auth": {"ssh_user": "unused"}, "file_mounts": {},
        "file_mounts_sync_continuously": False, **no_commands,
    }


def _status(address: str) -> pb.ServiceStatus:
    with grpc.insecure_channel(address) as channel:
        return pb_grpc.LoaderStub(channel).GetStatus(pb.GetStatusRequest(), timeout=10)


def _until(what: str, condition: Callable[[], bool], timeout_s: float, log: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what}\n{tail(log)}"
        time.sleep(0.5)


def _scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        lines = response.read().decode().splitlines()
    return {name: float(value) for name, value in (line.rsplit(" ", 1) for line in lines
                                                   if line.startswith("shardstream_"))}


def _removed_idle(monitor: Path) -> int:
    """Decode nodes the autoscaler removed as idle, by its log."""
    return sum(int(n) for n in re.findall(r"Removing (\d+) nodes of type decode \(idle\)", monitor.read_text()))


def _active_decode_nodes(monitor: Path) -> int:
    """Decode nodes in the autoscaler's latest status report."""
    active = monitor.read_text().rsplit("Active:", 1)[-1].split("Pending:", 1)[0]
    found = re.search(r"(\d+) decode\n", active)
    return int(found.group(1)) if found else 0


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_the_ray_autoscaler_adds_decode_nodes_for_a_starved_rank_and_removes_them_after(
        hosts: Hosts, tmp_path: Path, ray_temp_dir: str) -> None:
    from ray._private.services import get_node_ip_address

    ip = get_node_ip_address()  # where the provider's nodes register, and the head must be
    gcs, client_server, metrics = free_ports(3)
    config = tmp_path / "autoscaling.json"
    config.write_text(json.dumps(_autoscaling_config(f"{ip}:{gcs}")))
    home = tmp_path / "home"
    home.mkdir()
    env = {"RAY_FAKE_CLUSTER": "1", "AUTOSCALER_UPDATE_INTERVAL_S": "1", "RAY_AUTH_MODE": "disabled",
           "PYTHONPATH": os.getcwd()}  # decoders import tests.transforms
    head = hosts.start([str(BIN / "ray"), "start", "--head", f"--node-ip-address={ip}", f"--port={gcs}",
                        f"--ray-client-server-port={client_server}", "--num-cpus=0", "--include-dashboard=false",
                        f"--autoscaling-config={config}", f"--object-store-memory={NODE_STORE}",
                        f"--temp-dir={ray_temp_dir}"], home, "ray-start.log", env)
    assert head.wait(timeout=90) == 0, tail(tmp_path / "ray-start.log")
    port_file = tmp_path / "port"
    serve = hosts.start([str(BIN / "shardstream"), "serve", "--ray-address", f"{ip}:{gcs}", "--port", "0",
                         "--port-file", str(port_file), "--metrics-port", str(metrics), "--decoder-cpus", "1", "--autoscale-max-decoders", "3",
                         "--autoscale-window-s", "2", "--allow-transform-module", "tests.transforms"],
                        home, "serve.log", env)
    serve_log = tmp_path / "serve.log"
    wait_until("serve", lambda: port_file.exists() and port_file.read_text().strip() != "", [serve],
               [serve_log], deadline_s=120)
    address = f"127.0.0.1:{int(port_file.read_text())}"
    # No decode node at first: the service asks for its minimum, one, and the autoscaler launches it.
    _until("the first decode node never came", lambda: _status(address).scaling.ready == 1, 120, serve_log)

    data = tmp_path / "data"
    write_indexed(str(data), ROWS)
    with RemoteLoader(address, dataset=str(data), batch_size=BATCH, shuffle=True, seed=9, world_size=1, rank=0,
                      columns=["idx"], job_name="starved", timeout=120, connect_timeout=60,
                      **SLOW) as loader:  # type: ignore[arg-type]
        deadline, epoch, grown = time.monotonic() + 180, 0, None
        nodes: set[str] = set()
        while grown is None or epoch <= grown + 1:  # epochs until the pool grew, and one after
            assert time.monotonic() < deadline, f"the pool never grew: {_status(address).scaling}\n{tail(serve_log)}"
            loader.set_epoch(epoch)
            batches = []
            for step, batch in enumerate(loader):
                batches.append(batch["idx"].tolist())
                if step % 10 == 0:
                    nodes |= {d.node_id for d in _status(address).decoder_status}
            assert batches == oracle_batches(sum(ROWS), 1, 0, BATCH, True, 9, False, epoch), epoch
            if grown is None and len(nodes) >= 3:  # decoders on three nodes the autoscaler made
                grown = epoch
            epoch += 1
        assert loader.stats.decoders_lost == 0
    status = _status(address)
    assert status.scaling.decisions_up >= 1 and status.scaling.max_decoders == 3

    # The rank is gone: the service drains two decoders and asks for one unit; Ray removes the idle nodes.
    _until("the pool did not shrink", lambda: _status(address).scaling.ready == 1, 90, serve_log)
    assert "no rank is fetching" in _status(address).scaling.last_change
    monitor = Path(ray_temp_dir) / "session_latest" / "logs" / "monitor.log"
    _until("the autoscaler did not remove the idle nodes",
           lambda: _removed_idle(monitor) >= 2 and _active_decode_nodes(monitor) == 1, 90, monitor)
    assert serve_log.read_text().count("gave back the decode actor") >= 2  # drained, none lost
    scraped = _scrape(metrics)  # what the HPA and the dashboard read
    assert scraped["shardstream_decoders_wanted"] == 1 and scraped["shardstream_decoders_draining"] == 0
    assert scraped['shardstream_scaling_decisions_total{direction="up"}'] >= 1
    assert scraped['shardstream_scaling_decisions_total{direction="down"}'] >= 1
    assert 0 <= scraped["shardstream_decode_busy_ratio"] <= 1
