"""The consumer process: one loader, measured as a training process would experience it.

Child side: ``python -m bench.consumer SPEC.json OUT.json`` builds the loader
the spec names, runs ``meter.measure`` and writes the metrics as JSON. Parent
side: ``run_consumer(spec, ...)`` starts that process, enforces a deadline and
returns the metrics, or raises ``ConsumerFailed`` with the tail of its log.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.config import REPO_ROOT
from bench.spec import ConsumerSpec

log = logging.getLogger(__name__)

LOG_TAIL_LINES = 30


class ConsumerFailed(RuntimeError):
    """A consumer process exited non-zero, timed out, or wrote no result."""


def child_env() -> dict[str, str]:
    """The environment of every process the harness starts.

    ``RAY_ADDRESS=local``: a process that starts Ray without an address gets a new
    local Ray of its own, never a cluster someone else started on this machine
    (an explicit address, as ``bench.scaling`` passes, still wins).
    """
    path = os.environ.get("PYTHONPATH", "")
    return {
        **os.environ,
        "PYTHONPATH": f"{REPO_ROOT}{os.pathsep}{path}" if path else str(REPO_ROOT),
        "RAY_ADDRESS": "local",
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_DEDUP_LOGS": "0",
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "PYTHONWARNINGS": "ignore",
    }


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def run_consumer(spec: ConsumerSpec, timeout_s: float, log_path: Path) -> dict[str, Any]:
    """Run one consumer process for `spec`; returns its metrics as a dict."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench-consumer-") as tmp:
        spec_path, out_path = Path(tmp) / "spec.json", Path(tmp) / "out.json"
        spec.save(spec_path)
        command = [sys.executable, "-m", "bench.consumer", str(spec_path), str(out_path)]
        with open(log_path, "wb") as log_file:
            try:
                code = subprocess.run(command, stdout=log_file, stderr=subprocess.STDOUT,
                                      env=child_env(), cwd=REPO_ROOT, timeout=timeout_s,
                                      check=False).returncode
            except subprocess.TimeoutExpired:
                raise ConsumerFailed(f"{spec.system} consumer did not finish within {timeout_s:.0f} s; "
                                     f"log {log_path}:\n{log_tail(log_path)}") from None
        if code != 0 or not out_path.exists():
            raise ConsumerFailed(f"{spec.system} consumer exited with code {code}; "
                                 f"log {log_path}:\n{log_tail(log_path)}")
        result: dict[str, Any] = json.loads(out_path.read_text())
        return result


@contextlib.contextmanager
def background_consumer(spec: ConsumerSpec, log_path: Path, stop_grace_s: float = 10.0) -> Iterator[None]:
    """A consumer process of `spec` running while the block runs (the load other measurements share
    the service with), then stopped. It fails the block's measurement only by being gone early:
    a consumer that exits before the block ends raises ConsumerFailed."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench-background-") as tmp:
        spec_path = Path(tmp) / "spec.json"
        spec.save(spec_path)
        command = [sys.executable, "-m", "bench.consumer", str(spec_path), str(Path(tmp) / "out.json")]
        with open(log_path, "wb") as log_file:
            process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT,
                                       env=child_env(), cwd=REPO_ROOT)
            try:
                yield
                if process.poll() is not None:
                    raise ConsumerFailed(f"the background {spec.system} consumer ended early (code "
                                         f"{process.returncode}); log {log_path}:\n{log_tail(log_path)}")
            finally:
                process.terminate()
                try:
                    process.wait(timeout=stop_grace_s)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


def main(argv: list[str]) -> int:
    from bench.meter import measure
    from bench.systems import loader_factory

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    spec_path, out_path = Path(argv[0]), Path(argv[1])
    spec = ConsumerSpec.load(spec_path)
    metrics = measure(loader_factory(spec), max_batches=spec.max_batches,
                      warmup_batches=spec.warmup_batches, step_s=spec.step_ms / 1000,
                      server_pid=spec.server_pid)
    out_path.write_text(json.dumps(metrics.to_json(), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
