"""The README's cluster commands, run as written: `ray start --head` with token authentication on
(Ray turns it on when ~/.ray/auth_token exists), then `shardstream serve --ray-address HOST:PORT`.

With the head's token at hand, serve joins and a rank gets DistributedSampler's batches; without
it, serve exits at once with one line saying what to set, not Ray's ConnectionError after 20 s.
Every process is ended by its process group and a marker in its environment (tests/processes.py),
never by `ray stop`.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from shardstream.client import RemoteLoader
from tests.datasets import oracle_batches, write_indexed
from tests.processes import BIN, Hosts, free_ports, tail, tcp_open, wait_until


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_serve_joins_a_ray_start_cluster_with_token_auth(hosts: Hosts, tmp_path: Path, ray_temp_dir: str) -> None:
    head_home, no_token_home = tmp_path / "head-home", tmp_path / "elsewhere"
    head_home.mkdir()
    no_token_home.mkdir()
    generate = subprocess.run([str(BIN / "ray"), "get-auth-token", "--generate"], env=hosts.env(head_home),
                              capture_output=True, timeout=60)
    assert generate.returncode == 0 and (head_home / ".ray" / "auth_token").is_file(), generate.stderr
    gcs, client_server, raylet = free_ports(3)
    head = hosts.start([str(BIN / "ray"), "start", "--head", "--node-ip-address=127.0.0.1", f"--port={gcs}",
                        f"--ray-client-server-port={client_server}", f"--node-manager-port={raylet}",
                        "--num-cpus=1", '--resources={"decode": 1}', "--include-dashboard=false",
                        f"--object-store-memory={100 * 2**20}", f"--temp-dir={ray_temp_dir}"],
                       head_home, "ray-start.log")
    assert head.wait(timeout=90) == 0, tail(tmp_path / "ray-start.log")
    assert "Token authentication is enabled" in (tmp_path / "ray-start.log").read_text()
    address = f"127.0.0.1:{gcs}"

    # Another host's shell, without the head's token: one line at once, naming what to set.
    started = time.monotonic()
    refused = hosts.start([str(BIN / "shardstream"), "serve", "--ray-address", address, "--port", "0"],
                          no_token_home, "serve-without-token.log")
    assert refused.wait(timeout=60) == 1
    assert time.monotonic() - started < 30
    said = (tmp_path / "serve-without-token.log").read_text()
    assert f"the Ray cluster at {address} uses token authentication and this process has no token" in said
    assert "Traceback" not in said

    # With the token (the head's own home here): it joins, and a rank gets its exact batches.
    port_file = tmp_path / "port"
    serve = hosts.start([str(BIN / "shardstream"), "serve", "--ray-address", address, "--port", "0",
                         "--port-file", str(port_file)], head_home, "serve.log")
    wait_until("serve", lambda: port_file.exists() and port_file.read_text().strip() != "", [serve],
               [tmp_path / "serve.log"], deadline_s=120)
    port = int(port_file.read_text())
    assert tcp_open(port)
    data = tmp_path / "data"
    write_indexed(str(data), [9, 7])
    with RemoteLoader(f"127.0.0.1:{port}", dataset=str(data), batch_size=4, shuffle=True, seed=1, world_size=2,
                      rank=1, timeout=60, connect_timeout=60) as loader:
        loader.set_epoch(3)
        assert [b["idx"].tolist() for b in loader] == oracle_batches(16, 2, 1, 4, True, 1, False, 3)
    assert "RAY_AUTH_MODE=token" in (tmp_path / "serve.log").read_text()
