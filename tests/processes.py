"""Processes a test starts outside pytest (Ray nodes, `shardstream serve`), and their end.

Every process is started with a marker in its environment (`MARKER=<run id>`), which the
processes it starts inherit; `end_all` ends each started process group and every marked
process, so a test ends what it started and nothing else (`ray stop` would end every Ray on
the machine).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from contextlib import ExitStack, closing
from pathlib import Path
from typing import Any

MARKER = "SHARDSTREAM_TEST_PROCESS"
START_DEADLINE_S = 150
BIN = Path(sys.executable).parent  # the environment's scripts: ray, shardstream, torchrun


# Ray's own fixed ports (GCS, client server, dashboard, dashboard agent): a port the
# kernel hands out may be one of them, and `ray start` refuses two components on one port.
RAY_DEFAULT_PORTS = frozenset({6379, 8265, 10001, 52365})


def free_ports(n: int) -> list[int]:
    """n distinct free ports, none of them a port Ray takes by default."""
    with ExitStack() as stack:
        ports: list[int] = []
        while len(ports) < n:
            s = stack.enter_context(closing(socket.socket()))
            s.bind(("127.0.0.1", 0))  # held open until all are chosen, so no port comes twice
            if (port := s.getsockname()[1]) not in RAY_DEFAULT_PORTS:
                ports.append(port)
        return ports


def marked_pids(marker: str) -> list[int]:
    """Processes whose environment carries this run's marker (only ours can be read)."""
    needle = f"{MARKER}={marker}".encode()
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    if needle in f.read().split(b"\0"):
                        pids.append(int(entry))
            except OSError:
                pass
    return pids


def end_all(processes: list[subprocess.Popen[bytes]], marker: str) -> None:
    """SIGTERM each started process group and every marked process, then SIGKILL what is left
    (after 3 s: nothing a test starts needs a longer graceful shutdown)."""
    for sig, grace in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 5.0)):
        for p in processes:
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                pass
        for pid in marked_pids(marker):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and (marked_pids(marker) or any(p.poll() is None for p in processes)):
            time.sleep(0.2)
    for p in processes:
        if p.poll() is None:
            p.wait(timeout=5)


def tail(path: Path, lines: int = 40) -> str:
    text = path.read_text(errors="replace") if path.exists() else "(no log)"
    return f"--- {path.name}\n" + "\n".join(text.splitlines()[-lines:])


def wait_until(what: str, ready: Any, processes: list[subprocess.Popen[bytes]], logs: list[Path],
               deadline_s: float = START_DEADLINE_S) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        for p in processes:
            if p.poll() is not None:
                raise AssertionError(f"{what}: {p.args!r} exited with {p.returncode}\n"
                                     + "\n".join(tail(log) for log in logs))
        if ready():
            return
        time.sleep(0.5)
    raise AssertionError(f"{what}: not within {deadline_s} s\n" + "\n".join(tail(log) for log in logs))


def tcp_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


class Hosts:
    """Processes started like a user's shell would start them, each in its own process group."""

    def __init__(self, root: Path) -> None:
        self.root, self.marker = root, uuid.uuid4().hex
        self.processes: list[subprocess.Popen[bytes]] = []

    def env(self, home: Path) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "SHARDSTREAM_"))}
        return {**base, "HOME": str(home), "RAY_USAGE_STATS_ENABLED": "0", MARKER: self.marker,
                "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}

    def start(self, argv: list[str], home: Path, log: str,
              env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """`argv` in its own process group, output to `log` under the root; `env` added."""
        with open(self.root / log, "wb") as f:
            p = subprocess.Popen(argv, env={**self.env(home), **(env or {})}, stdout=f, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, start_new_session=True)
        self.processes.append(p)
        return p


__all__ = ["BIN", "MARKER", "START_DEADLINE_S", "Hosts", "end_all", "free_ports", "marked_pids", "tail", "tcp_open", "wait_until"]
