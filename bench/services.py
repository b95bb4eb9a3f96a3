"""Server processes the harness starts and stops: the shardstream service, a tf.data service, raw servers.

Each runs in its own session (process group), announces itself by writing a
port file, and is stopped with SIGTERM, then SIGKILL to its own process group
if it has not exited within the grace period, so nothing it started (an
embedded Ray, a tf.data worker) outlives the benchmark.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

from bench.config import REPO_ROOT
from bench.consumer import child_env, log_tail

log = logging.getLogger(__name__)

START_TIMEOUT_S = 180.0
STOP_GRACE_S = 30.0


class ServerFailed(RuntimeError):
    """A server process exited or did not announce itself in time."""


class ServerProcess:
    """``with ServerProcess(...) as server: server.announced`` is the port file's text."""

    def __init__(self, name: str, command: list[str], port_file: Path, log_path: Path,
                 start_timeout_s: float = START_TIMEOUT_S, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.env = env or {}
        self.command = command
        self.port_file = port_file
        self.log_path = log_path
        self.start_timeout_s = start_timeout_s
        self.process: subprocess.Popen[bytes] | None = None
        self.announced = ""
        self.start_s = 0.0  # from launching the process to its port file

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def __enter__(self) -> ServerProcess:
        self.port_file.unlink(missing_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        with open(self.log_path, "wb") as log_file:
            self.process = subprocess.Popen(self.command, stdout=log_file, stderr=subprocess.STDOUT,
                                            env={**child_env(), **self.env}, cwd=REPO_ROOT,
                                            start_new_session=True)
        try:
            self.announced = self._wait_for_port_file()
        except BaseException:
            self.stop()
            raise
        self.start_s = time.perf_counter() - started
        log.info("%s up in %.1f s (pid %d): %s", self.name, self.start_s, self.pid, self.announced)
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()

    def _wait_for_port_file(self) -> str:
        assert self.process is not None
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            try:
                text = self.port_file.read_text().strip()
            except FileNotFoundError:
                text = ""
            if text:
                return text
            if self.process.poll() is not None:
                raise ServerFailed(f"{self.name} exited with code {self.process.returncode} before "
                                   f"serving; log {self.log_path}:\n{log_tail(self.log_path)}")
            time.sleep(0.1)
        raise ServerFailed(f"{self.name} did not start within {self.start_timeout_s:.0f} s; "
                           f"log {self.log_path}:\n{log_tail(self.log_path)}")

    def stop(self) -> None:
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            log.warning("%s did not stop within %.0f s: killing its process group", self.name,
                        STOP_GRACE_S)
        # Whatever it started in its own process group (an embedded Ray's processes) goes too.
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(timeout=STOP_GRACE_S)


def shardstream_service(num_decoders: int, work_dir: Path, ray_address: str | None = None,
                        log_name: str = "service.log",
                        tls: tuple[str, str] | None = None,
                        config: dict[str, str] | None = None) -> ServerProcess:
    """``shardstream serve`` on a free loopback port with `num_decoders` decode actors
    (speaking TLS with `tls` = (certificate, key) files; `config`: ServiceConfig fields, by name)."""
    port_file = work_dir / "shardstream.port"
    command = [sys.executable, "-m", "shardstream.service.cli", "--log-level", "WARNING", "serve",
               "--host", "127.0.0.1", "--port", "0", "--port-file", str(port_file),
               "--num-decoders", str(num_decoders)]
    if ray_address:
        command += ["--ray-address", ray_address]
    if tls:
        command += ["--tls-cert", tls[0], "--tls-key", tls[1]]
    env = {f"SHARDSTREAM_{name.upper()}": value for name, value in (config or {}).items()}
    return ServerProcess("shardstream service", command, port_file, work_dir / log_name, env=env)


def tfdata_service(workload_dir: Path, work_dir: Path) -> ServerProcess:
    port_file = work_dir / "tfdata.target"
    command = [sys.executable, "-m", "bench.systems.tfdata_server", "--workload", str(workload_dir),
               "--port-file", str(port_file)]
    return ServerProcess("tf.data service", command, port_file, work_dir / "tfdata-service.log",
                         start_timeout_s=600.0)  # includes the one-off TFRecord export


def raw_server(kind: str, work_dir: Path) -> ServerProcess:
    """A raw gRPC (`grpc`) or raw TCP (`tcp`) byte-streaming server on loopback."""
    module = {"grpc": "bench.transport.raw_grpc", "tcp": "bench.transport.raw_tcp"}[kind]
    port_file = work_dir / f"raw-{kind}.port"
    command = [sys.executable, "-m", module, "--port-file", str(port_file)]
    return ServerProcess(f"raw {kind} server", command, port_file, work_dir / f"raw-{kind}.log")


__all__ = ["ServerFailed", "ServerProcess", "raw_server", "shardstream_service", "tfdata_service"]
