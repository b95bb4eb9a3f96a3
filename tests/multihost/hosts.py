"""Separate hosts on one Linux machine: network namespaces on a bridge.

Each host is a network namespace with its own address on a private bridge
(10.<a>.<b>.0/24 inside this machine only), its own loopback and its own port
space, so Ray nodes, `shardstream serve` and torchrun ranks run there exactly
as on separate machines: every byte between hosts crosses a veth link whose
counters say how many, and whose rate can be capped (`tc ... tbf`) or cut
(`ip link set DEV down`). Files stay shared (one mount namespace), as a
network filesystem would share the dataset.

`Network` always cleans up: the processes it started (by process group and by
a marker in their environment, never `ray stop`) and every process still inside
its namespaces, then the namespaces and the bridge. `usable()` says why the machine cannot make hosts (not root, no `ip`).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from tests.processes import MARKER, end_all, marked_pids


def usable() -> str | None:
    """None when this machine can make hosts, else why not."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"`{tool}` (iproute2) is not installed"
    probe = f"ss-probe-{uuid.uuid4().hex[:6]}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _ip(*args: str, netns: str | None = None) -> None:
    argv = ["ip", *(("netns", "exec", netns, "ip") if netns else ()), *args]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")


@dataclass
class Host:
    """One namespace: `ip` on the bridge; `link` is its veth end on the bridge side (what
    `cut`, `limit` and the counters act on), `inside` its own end."""

    name: str
    netns: str
    ip: str
    link: str
    inside: str
    network: Network = field(repr=False)

    def start(self, argv: Sequence[str], log: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """`argv` on this host, in a process group of its own, output to `log` under the network's root."""
        full_env = {**self.network.base_env, **(env or {})}
        with open(self.network.root / log, "wb") as f:
            p = subprocess.Popen(["ip", "netns", "exec", self.netns, *argv], env=full_env, stdout=f,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        self.network.processes.append(p)
        return p

    def run(self, argv: Sequence[str], timeout: float, env: dict[str, str] | None = None,
            log: str | None = None) -> subprocess.CompletedProcess[str]:
        """`argv` on this host, waited for; its output kept in `log` too when given."""
        done = subprocess.run(["ip", "netns", "exec", self.netns, *argv], env={**self.network.base_env, **(env or {})},
                              capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        if log:
            (self.network.root / log).write_text(done.stdout + done.stderr)
        return done

    def sent_bytes(self) -> int:
        """Bytes this host has sent on its link (what the bridge side received)."""
        return int(Path(f"/sys/class/net/{self.link}/statistics/rx_bytes").read_text())

    def received_bytes(self) -> int:
        return int(Path(f"/sys/class/net/{self.link}/statistics/tx_bytes").read_text())

    def cut(self) -> None:
        _ip("link", "set", self.link, "down")

    def restore(self) -> None:
        _ip("link", "set", self.link, "up")

    def kill(self) -> None:
        """SIGKILL every process on this host, as a machine that loses power (its link stays up)."""
        listed = subprocess.run(["ip", "netns", "pids", self.netns], capture_output=True, text=True)
        for pid in (int(p) for p in listed.stdout.split()):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def limit(self, mbit: float) -> None:
        """Cap this host's link at `mbit` Mbit/s both ways (token bucket; netem is not needed)."""
        rate = f"{mbit}mbit"
        for device, netns in ((self.link, None), (self.inside, self.netns)):
            argv = ["tc", "qdisc", "replace", "dev", device, "root", "tbf", "rate", rate, "burst", "256kb",
                    "latency", "100ms"]
            done = subprocess.run(["ip", "netns", "exec", netns, *argv] if netns else argv, capture_output=True,
                                  text=True)
            if done.returncode != 0:
                raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")


class Network:
    """Hosts on one bridge; a context manager that always tears everything down."""

    def __init__(self, names: Sequence[str], root: Path) -> None:
        self.root = root
        self.tag = uuid.uuid4().hex[:4]
        self.bridge = f"ss{self.tag}br"
        self.subnet = f"10.{random.randint(64, 127)}.{random.randint(0, 255)}"
        self.marker = uuid.uuid4().hex
        self.processes: list[subprocess.Popen[bytes]] = []
        self.hosts: dict[str, Host] = {}
        self._names = list(names)
        home = root / "home"  # no ~/.ray/auth_token of the user's: Ray's authentication stays off
        home.mkdir(parents=True, exist_ok=True)
        self.base_env = {**{k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "SHARDSTREAM_"))},
                         "HOME": str(home), "RAY_USAGE_STATS_ENABLED": "0", MARKER: self.marker}

    def __enter__(self) -> Network:
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            _ip("link", "set", self.bridge, "up")
            for i, name in enumerate(self._names, start=1):
                netns, link, inside = f"ss{self.tag}-{name}", f"ss{self.tag}h{i}", f"ss{self.tag}i{i}"
                _ip("netns", "add", netns)
                _ip("link", "add", link, "type", "veth", "peer", "name", inside)
                _ip("link", "set", inside, "netns", netns)
                _ip("link", "set", link, "master", self.bridge, "up")
                ip = f"{self.subnet}.{i}"
                _ip("addr", "add", f"{ip}/24", "dev", inside, netns=netns)
                _ip("link", "set", inside, "up", netns=netns)
                _ip("link", "set", "lo", "up", netns=netns)
                self.hosts[name] = Host(name, netns, ip, link, inside, self)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        end_all(self.processes, self.marker)
        # Ray's agents re-exec with an environment of their own (no marker) and leave their
        # process group: whatever still lives in one of these namespaces is this network's.
        for sig, grace in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 5.0)):
            self._signal_inside(sig)
            deadline = time.monotonic() + grace
            while self._pids_inside() and time.monotonic() < deadline:
                time.sleep(0.2)
        left = self._pids_inside() + marked_pids(self.marker)
        for host in self.hosts.values():
            subprocess.run(["ip", "netns", "del", host.netns], capture_output=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)
        if left:
            raise RuntimeError(f"processes of this network outlived it: {left}")

    def _pids_inside(self) -> list[int]:
        pids = []
        for host in self.hosts.values():
            listed = subprocess.run(["ip", "netns", "pids", host.netns], capture_output=True, text=True)
            pids += [int(p) for p in listed.stdout.split()]
        return pids

    def _signal_inside(self, sig: signal.Signals) -> None:
        for pid in self._pids_inside():
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def __getitem__(self, name: str) -> Host:
        return self.hosts[name]


__all__ = ["Host", "Network", "usable"]
