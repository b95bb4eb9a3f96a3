"""The chart's container commands, run as rendered, serve batches.

The head and decode worker commands (and the decode pod's init container) are taken from the
rendered Deployments and run here as processes, the way kubelet would start them: environment
from the rendered ConfigMap and `env` (downward-API pod IP = 127.0.0.1, `$(VAR)` expanded), the
Ray head's Service name rewritten to 127.0.0.1. The chart's values pick free ports, a small
object store and a private Ray temp dir, so nothing collides with other Ray instances on the
machine. Every process started here (and every process they start) is ended by process group
and by a marker in its environment; `ray stop` is never used, since it would end every Ray
instance of the user.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from shardstream.client import RemoteLoader
from tests.chart.chart import FULLNAME, container, flags, port_named, render, script
from tests.datasets import oracle_batches, write_indexed
from tests.processes import MARKER, end_all, free_ports, marked_pids, tail, tcp_open, wait_until

STOP_DEADLINE_S = 30
OBJECT_STORE_BYTES = 100 * 2**20
BIN = Path(sys.executable).parent


def kubelet_env(c: dict[str, Any], config_maps: dict[str, dict[str, str]]) -> dict[str, str]:
    """A container's environment as kubelet builds it, for a pod whose IP is 127.0.0.1."""
    env: dict[str, str] = {}
    for source in c.get("envFrom", []):
        env.update(config_maps[source["configMapRef"]["name"]])
    for var in c.get("env", []):
        if "value" in var:
            env[var["name"]] = re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                                      lambda m: env.get(m.group(1), m.group(0)), var["value"])
        elif var["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}:
            env[var["name"]] = "127.0.0.1"
        else:
            raise AssertionError(f"no local stand-in for {var}")
    return env


def process_env(c: dict[str, Any], config_maps: dict[str, dict[str, str]], home: str,
                marker: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "SHARDSTREAM_"))}
    base.update(PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", HOME=home, **{MARKER: marker})
    return {**base, **kubelet_env(c, config_maps)}


def argv(c: dict[str, Any]) -> list[str]:
    return [word.replace(f"{FULLNAME}-ray-head", "127.0.0.1") for word in c["command"] + c["args"]]


def health(address: str, service: str) -> int:
    with grpc.insecure_channel(address) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=2)
        except grpc.RpcError:
            return -1
    return int(reply.status)


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        assert reply.status == 200
        return str(reply.read().decode())


def metric(text: str, name: str) -> float:
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + " ")]
    assert len(values) == 1, f"{name}: {values}\n{text}"
    return values[0]


@pytest.fixture
def ray_temp_dir() -> Iterator[str]:
    # Short: Ray's unix sockets live under it, and their paths are limited to 107 bytes.
    path = tempfile.mkdtemp(prefix="ss-chart-", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_rendered_commands_serve_batches(tmp_path: Path, ray_temp_dir: str) -> None:
    grpc_port, metrics_port, gcs_port, client_port, head_raylet, decode_raylet = free_ports(6)
    out = render({
        "service": {"port": grpc_port},
        "metrics": {"enabled": True, "port": metrics_port},
        "ray": {"gcsPort": gcs_port, "clientServerPort": client_port, "nodeManagerPort": head_raylet,
                "objectStoreMemory": OBJECT_STORE_BYTES, "tempDir": ray_temp_dir},
        # Two raylets on one host need two ports; in a cluster each pod has its own IP.
        # The local copy's volume stands in as a directory of this test's own.
        "decode": {"cpus": 2, "rayStartParams": {"node-manager-port": decode_raylet},
                   "localCopy": {"mountPath": str(tmp_path / "local-copy")}},
    })
    config_maps = {cm["metadata"]["name"]: cm["data"] for cm in out.of_kind("ConfigMap")}
    head_c, wait_c = container(out.head, "head"), container(out.decode, "wait-for-head")
    decode_c = container(out.decode, "decode")
    (copy_mount,) = [m["mountPath"] for m in decode_c["volumeMounts"] if m["name"] == "local-copy"]
    ray_start = next(line for line in script(decode_c).splitlines() if "ray start" in line)
    decoders = json.loads(flags(ray_start)["resources"])["decode"]  # one decode actor per unit
    data_ports = {p["containerPort"] for p in decode_c["ports"] if p["name"].startswith("data-")}
    data = tmp_path / "data"
    write_indexed(str(data), [13, 7, 10], row_group_size=3)
    home = tmp_path / "home"  # the image's home is on its read-only root filesystem
    home.mkdir()
    marker = uuid.uuid4().hex
    logs = {name: tmp_path / f"{name}.log" for name in ("head", "wait-for-head", "decode")}

    def start(c: dict[str, Any], log: Path) -> subprocess.Popen[bytes]:
        with open(log, "wb") as f:
            return subprocess.Popen(argv(c), env=process_env(c, config_maps, str(home), marker),
                                    stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)

    processes: list[subprocess.Popen[bytes]] = []
    try:
        head = start(head_c, logs["head"])
        processes.append(head)
        wait_until("the head's GCS", lambda: tcp_open(gcs_port), [head], [logs["head"]])
        init = start(wait_c, logs["wait-for-head"])
        processes.append(init)
        assert init.wait(timeout=90) == 0, tail(logs["wait-for-head"])
        decode = start(decode_c, logs["decode"])
        processes.append(decode)
        address = f"127.0.0.1:{grpc_port}"
        # The head's probes, as kubelet runs them: gRPC health on the rendered port and service.
        probes = [head_c[p]["grpc"] for p in ("startupProbe", "readinessProbe", "livenessProbe")]
        assert {p["port"] for p in probes} == {grpc_port}
        wait_until("the head's gRPC health", lambda: all(
            health(address, p.get("service", "")) == health_pb2.HealthCheckResponse.SERVING for p in probes),
            [head, decode], list(logs.values()))
        # The decode worker's probes: its raylet listens on the rendered port.
        assert decode_c["readinessProbe"]["tcpSocket"]["port"] == "raylet"
        assert tcp_open(port_named(decode_c, "raylet"))

        for epoch in (0, 1):
            for rank in (0, 1):
                with RemoteLoader(address, dataset=str(data), batch_size=4, shuffle=True, seed=5,
                                  drop_last=False, rank=rank, world_size=2, job_name="chart-smoke",
                                  timeout=60, connect_timeout=30) as loader:
                    loader.set_epoch(epoch)
                    got = [batch["idx"].tolist() for batch in loader]
                    fetched_from = {int(a.rsplit(":", 1)[1]) for a in loader.job.batch_servers}
                assert got == oracle_batches(30, 2, rank, 4, True, 5, False, epoch), (epoch, rank)
                # The direct data plane (the default): batches came from the decode worker's
                # actors, on the data ports its container declares.
                assert len(fetched_from) == decoders and fetched_from <= data_ports, (fetched_from, data_ports)

        status = subprocess.run([str(BIN / "shardstream"), "status", address], capture_output=True,
                                text=True, timeout=30)
        assert status.returncode == 0, status.stderr
        assert f"{decoders} decoder(s) on 1 node(s)" in status.stdout, status.stdout

        # Decoders report their counters to the head every reconcile interval, so the scrape
        # that follows the last batch may not count it yet: wait (bounded) for the last report.
        served = 'shardstream_samples_served_total{job="chart-smoke"}'
        scrapes: list[str] = []

        def all_reported() -> bool:
            scrapes.append(scrape(metrics_port))
            return served + " " in scrapes[-1] and metric(scrapes[-1], served) >= 2 * 30

        wait_until("the decoders' last report", all_reported, [head, decode], list(logs.values()),
                   deadline_s=30)
        assert metric(scrapes[-1], "shardstream_decoders") == decoders
        assert metric(scrapes[-1], served) == 2 * 30  # not one sample counted twice

        # Pod deletion: SIGTERM to the head container's process (serve, exec'd by the shell).
        head.send_signal(signal.SIGTERM)
        assert head.wait(timeout=STOP_DEADLINE_S) == 0, tail(logs["head"])
        assert sorted(os.listdir(home)) == [], "wrote to $HOME, which is read-only in the image"
        # The decode actors kept the row groups they read in the decode container's volume.
        assert list(Path(copy_mount).glob("*/*.arrow")), sorted(Path(copy_mount).rglob("*"))
    finally:
        end_all(processes, marker)
    assert marked_pids(marker) == []
