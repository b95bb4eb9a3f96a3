"""`make demo`: build the digits dataset, start a local service, train on it with torchrun.

    .venv/bin/python examples/demo.py

Everything runs on this machine: `shardstream serve` starts an embedded Ray
with two decode actors, and two torchrun ranks stream their batches from it.
Scratch files (dataset, port file, service log) go to .demo/ at the repo root.
The exit code is torchrun's, so CI can run this as a smoke test.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import BinaryIO

from build_digits import build

ROOT = Path(__file__).resolve().parent.parent
DEMO_DIR = ROOT / ".demo"
DATA_DIR = DEMO_DIR / "digits"
PORT_FILE = DEMO_DIR / "service.port"
SERVICE_LOG = DEMO_DIR / "service.log"
BIN = Path(sys.executable).parent  # the venv's shardstream and torchrun live next to python

HOST = "127.0.0.1"
NUM_DECODERS = 2
NPROC = 2
EPOCHS = 5
BATCH_SIZE = 32
START_DEADLINE_S = 120.0  # starting Ray takes seconds; a stuck start should not hang CI
STOP_TIMEOUT_S = 20.0
LOG_TAIL_LINES = 40


class DemoError(Exception):
    """A step of the demo failed; the message says which and why."""


def subprocess_env() -> dict[str, str]:
    """No usage-stats prompt or phone-home from Ray, and one thread per process so two ranks
    plus the decoders do not oversubscribe a small machine."""
    return {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "OMP_NUM_THREADS": "1"}


def start_service(log: BinaryIO) -> subprocess.Popen:
    """`shardstream serve` on a free port; it writes the port to PORT_FILE once it serves."""
    PORT_FILE.unlink(missing_ok=True)  # a stale file would make us connect to a dead port
    command = [str(BIN / "shardstream"), "serve", "--host", HOST, "--port", "0",
               "--port-file", str(PORT_FILE), "--num-decoders", str(NUM_DECODERS)]
    print(f"starting the service (log: {SERVICE_LOG.relative_to(ROOT)})", flush=True)
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=subprocess_env(),
                            cwd=ROOT)


def read_port() -> int | None:
    """The port, or None while the file is missing or half-written."""
    try:
        text = PORT_FILE.read_text().strip()
    except FileNotFoundError:
        return None
    return int(text) if text.isdigit() else None


def wait_for_port(service: subprocess.Popen) -> int:
    """Poll for the port file until the deadline, failing fast if the service exits."""
    deadline = time.monotonic() + START_DEADLINE_S
    while time.monotonic() < deadline:
        port = read_port()
        if port is not None:
            return port
        if service.poll() is not None:
            raise DemoError(f"the service exited with code {service.returncode} before serving")
        time.sleep(0.2)
    raise DemoError(f"the service did not start serving within {START_DEADLINE_S:.0f} s")


def stop_service(service: subprocess.Popen) -> None:
    """SIGTERM lets the service drain and shut its Ray down; SIGKILL only if it hangs."""
    if service.poll() is not None:
        return
    service.send_signal(signal.SIGTERM)
    try:
        service.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        print(f"the service ignored SIGTERM for {STOP_TIMEOUT_S:.0f} s: killing it", flush=True)
        service.kill()
        service.wait()


def log_tail() -> str:
    """The end of the service log: where the reason for a failed start usually is."""
    try:
        lines = SERVICE_LOG.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return "(no service log)"
    return "\n".join(lines[-LOG_TAIL_LINES:])


def train(address: str) -> int:
    """Run torchrun in the foreground; its output goes straight to ours as it is produced."""
    command = [str(BIN / "torchrun"), "--nproc-per-node", str(NPROC), "--standalone",
               str(ROOT / "examples" / "train_digits.py"), "--address", address,
               "--data", str(DATA_DIR), "--epochs", str(EPOCHS), "--batch-size", str(BATCH_SIZE)]
    print(f"training: torchrun --nproc-per-node {NPROC} examples/train_digits.py "
          f"--address {address} ...", flush=True)
    return subprocess.run(command, env=subprocess_env(), cwd=ROOT, check=False).returncode


def main() -> int:
    DEMO_DIR.mkdir(exist_ok=True)
    state = "built" if build(str(DATA_DIR)) else "reused"
    print(f"dataset {state}: {DATA_DIR.relative_to(ROOT)}", flush=True)
    with SERVICE_LOG.open("wb") as log:
        service = start_service(log)
        try:
            port = wait_for_port(service)
            print(f"service ready on {HOST}:{port}", flush=True)
            code = train(f"{HOST}:{port}")
        except DemoError as exc:
            print(f"demo failed: {exc}\n--- service log tail ---\n{log_tail()}", file=sys.stderr)
            return 1
        finally:
            stop_service(service)
    if code != 0:
        print(f"training failed (torchrun exit code {code})\n--- service log tail ---\n{log_tail()}",
              file=sys.stderr)
    else:
        print("demo finished: service stopped", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
