"""Draw docs/images/dashboard.png: the Grafana dashboard's panels over a real local run.

    .venv/bin/pip install -e '.[bench]'     # matplotlib
    apt-get install prometheus              # Debian's Prometheus server (any 2.x on PATH works)
    .venv/bin/python deploy/grafana/render_dashboard.py

A developer tool: nothing imports it and no test runs it. There is no Grafana
here, so it does what Grafana would do with shardstream-dashboard.json and
draws the result itself:

1. writes a small Parquet dataset of JPEGs to a temporary directory;
2. starts `shardstream serve` (an embedded Ray, two decode actors, metrics on,
   a prepared-sample cache that holds part of the dataset);
3. starts a real Prometheus that scrapes the service's /metrics every second
   (honor_labels, like the chart's ServiceMonitor, so `job` is shardstream's);
4. runs a workload of RemoteLoader ranks in threads (each job's ranks meet at
   a barrier after every step, as DDP's all-reduce makes them): job `train`
   (4 ranks) from the start, job `sweep` (2 ranks, the same dataset and
   transform) from 45% of the run; at 65% one decode actor is killed; at 30%
   and 80% a client names a dataset that does not exist;
5. evaluates every target's `expr` of every panel with Prometheus's
   query_range API ($job = All, $__rate_interval = --rate-interval);
6. draws the panels in the dashboard's gridPos layout with their titles,
   units and legends.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

log = logging.getLogger("render_dashboard")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DASHBOARD = HERE / "shardstream-dashboard.json"
OUT = ROOT / "docs" / "images" / "dashboard.png"

IMAGES, SHARDS, ROW_GROUP, IMAGE_SIDE = 3072, 4, 96, 160
TRANSFORM_ARGS = {"size": 112, "resize_short": 128}
BATCH_SIZE = 32
# Seconds each rank's "training step" takes (the loop's own work between two batches).
TRAIN_STEP_S = (0.050, 0.055, 0.060, 0.080)  # rank 3 is a little slower
SWEEP_STEP_S = (0.040, 0.040)
START_TIMEOUT_S = 180.0

# Grafana's dark theme and its classic palette.
BACKGROUND, PANEL, BORDER, TEXT, GRID = "#111217", "#181b1f", "#2c3235", "#ccccdc", "#2a2d33"
PALETTE = ("#73BF69", "#F2CC0C", "#8AB8FF", "#FF780A", "#F2495C", "#5794F2", "#B877D9",
           "#705DA0", "#37872D", "#FADE2A")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def write_dataset(directory: Path) -> None:
    """Photo-like JPEGs (gradients, a wave, noise) with labels, in a few Parquet shards."""
    directory.mkdir(parents=True)
    y, x = np.mgrid[0:IMAGE_SIDE, 0:IMAGE_SIDE].astype(np.float32) / IMAGE_SIDE
    per_shard = IMAGES // SHARDS
    for shard in range(SHARDS):
        images, labels = [], []
        for index in range(shard * per_shard, (shard + 1) * per_shard):
            rng = np.random.default_rng(index)
            coef = rng.uniform(-1, 1, size=(3, 3)).astype(np.float32)
            wave = np.sin(2 * np.pi * rng.uniform(1, 5) * (x + y))
            pixels = np.stack([coef[c, 0] * x + coef[c, 1] * y + coef[c, 2] * wave for c in range(3)], -1)
            pixels = (pixels - pixels.min()) * (235 / max(float(np.ptp(pixels)), 1e-6))
            pixels += rng.integers(0, 20, size=pixels.shape)
            buffer = io.BytesIO()
            Image.fromarray(pixels.astype(np.uint8)).save(buffer, format="JPEG", quality=90)
            images.append(buffer.getvalue())
            labels.append(index % 10)
        table = pa.table({"image": pa.array(images, pa.binary()), "label": pa.array(labels, pa.int64())})
        pq.write_table(table, directory / f"part-{shard:05d}.parquet", row_group_size=ROW_GROUP)


@contextmanager
def process(name: str, command: list[str], log_path: Path, env: dict[str, str] | None = None,
            ready: Callable[[], bool] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """A child in its own session, waited for by `ready`; on exit SIGTERM, then SIGKILL to its
    process group (an embedded Ray's processes included)."""
    with open(log_path, "wb") as out:
        child = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                 env={**os.environ, **(env or {})}, cwd=ROOT)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while ready is not None and not ready():
            if child.poll() is not None or time.monotonic() > deadline:
                tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-30:])
                raise RuntimeError(f"{name} did not start (log {log_path}):\n{tail}")
            time.sleep(0.2)
        log.info("%s up (pid %d)", name, child.pid)
        yield child
    finally:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
            try:
                child.wait(timeout=30)
            except subprocess.TimeoutExpired:
                log.warning("%s did not stop within 30 s", name)
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        child.wait(timeout=30)


def serve(work: Path, metrics_port: int) -> Any:
    port_file = work / "service.port"
    command = [sys.executable, "-m", "shardstream.service.cli", "--log-level", "WARNING", "serve",
               "--host", "127.0.0.1", "--port", "0", "--port-file", str(port_file),
               "--num-decoders", "2", "--decoder-cpus", "0.5", "--metrics-port", str(metrics_port),
               "--local-copy-dir", str(work / "local-copy"),
               "--prepared-cache-memory-bytes", str(40 << 20),
               "--prepared-cache-memory-dir", str(work / "prepared")]
    env = {"RAY_ADDRESS": "local", "RAY_USAGE_STATS_ENABLED": "0", "OMP_NUM_THREADS": "1"}
    return process("shardstream serve", command, work / "service.log", env,
                   ready=lambda: port_file.exists() and port_file.read_text().strip().isdigit())


def prometheus(binary: str, work: Path, metrics_port: int, port: int) -> Any:
    config = work / "prometheus.yml"
    config.write_text(json.dumps({  # JSON is YAML
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": [{"job_name": "shardstream-service", "honor_labels": True,
                            "static_configs": [{"targets": [f"127.0.0.1:{metrics_port}"]}]}]}))
    command = [binary, f"--config.file={config}", f"--storage.tsdb.path={work / 'tsdb'}",
               f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"]

    def ready() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=2) as reply:
                return bool(reply.status == 200)
        except OSError:
            return False

    return process("prometheus", command, work / "prometheus.log", ready=ready)


class Job:
    """A job's ranks as threads; after each step they meet at a barrier (DDP's all-reduce)."""

    def __init__(self, address: str, dataset: str, name: str, step_s: tuple[float, ...], stop_at: float) -> None:
        self.address, self.dataset, self.name, self.step_s = address, dataset, name, step_s
        self.stop_at, self.stop = stop_at, False
        self.barrier = threading.Barrier(len(step_s), action=self._decide)
        self.errors: list[BaseException] = []
        self.threads = [threading.Thread(target=self._rank, args=(r,), name=f"{name}-{r}", daemon=True)
                        for r in range(len(step_s))]

    def _decide(self) -> None:  # runs once per barrier cycle, before any rank goes on
        self.stop = time.monotonic() >= self.stop_at

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def join(self) -> None:
        for thread in self.threads:
            thread.join(timeout=120)
        if self.errors:
            raise RuntimeError(f"job {self.name} failed") from self.errors[0]

    def _rank(self, rank: int) -> None:
        from shardstream.client import RemoteLoader

        try:
            with RemoteLoader(self.address, dataset=self.dataset, batch_size=BATCH_SIZE, shuffle=True,
                              seed=0, drop_last=True, transform="image", transform_args=TRANSFORM_ARGS,
                              rank=rank, world_size=len(self.step_s), job_name=self.name) as loader:
                for epoch in range(10**6):
                    loader.set_epoch(epoch)
                    for _batch in loader:
                        time.sleep(self.step_s[rank])
                        self.barrier.wait(timeout=300)
                        if self.stop:
                            return
        except BaseException as e:
            self.errors.append(e)
            self.barrier.abort()


def kill_one_decoder(service_pid: int) -> None:
    """SIGKILL one decode actor's process (a child of the service we started), as a lost node would."""
    import psutil

    for child in psutil.Process(service_pid).children(recursive=True):
        try:
            title = " ".join(child.cmdline())
        except psutil.Error:
            continue
        if title.startswith("ray::DecodeWorker"):
            log.info("killing decode actor pid %d (%s)", child.pid, title[:60])
            os.kill(child.pid, signal.SIGKILL)
            return
    log.warning("no decode actor process found to kill")


def ask_for_missing_dataset(address: str, work: Path) -> None:
    from shardstream.client import DatasetNotFound, RemoteLoader

    try:
        RemoteLoader(address, dataset=str(work / "no-such-dataset"), batch_size=8, rank=0, world_size=1).close()
    except DatasetNotFound:
        log.info("a missing dataset was refused (NOT_FOUND), as expected")


def workload(address: str, dataset: str, work: Path, service_pid: int, seconds: float) -> None:
    start = time.monotonic()
    end = start + seconds
    train = Job(address, dataset, "train", TRAIN_STEP_S, end)
    sweep = Job(address, dataset, "sweep", SWEEP_STEP_S, end)
    train.start()
    events: list[tuple[float, Callable[[], None]]] = [
        (0.30, lambda: ask_for_missing_dataset(address, work)),
        (0.45, sweep.start),
        (0.65, lambda: kill_one_decoder(service_pid)),
        (0.80, lambda: ask_for_missing_dataset(address, work)),
    ]
    for at, event in events:
        time.sleep(max(0.0, start + at * seconds - time.monotonic()))
        log.info("t=%.0f s", time.monotonic() - start)
        event()
    train.join()
    sweep.join()


def query_range(port: int, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
    params = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/query_range?{params}", timeout=30) as reply:
            body = json.load(reply)
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"Prometheus refused {expr!r}: {e.read().decode()}") from e
    if body["status"] != "success":
        raise RuntimeError(f"Prometheus refused {expr!r}: {body}")
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def substitute(expr: str, rate_interval: str) -> str:
    """The dashboard's variables as Grafana would fill them: $job = All (its allValue, .*)."""
    return expr.replace("$__rate_interval", rate_interval).replace("$job", ".*")


def legend(fmt: str, labels: dict[str, str]) -> str:
    if not fmt:
        return "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m[1], ""), fmt)


def si(value: float, suffix: str = "") -> str:
    for scale, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{suffix}".rstrip()
    return f"{value:.3g} {suffix}".rstrip() if value else f"0 {suffix}".rstrip()


def formatter(unit: str) -> Callable[[float, Any], str]:
    """Axis labels in Grafana's units: short, Bps (bytes/s, SI), percentunit (0..1), s."""
    def short(value: float, _pos: Any) -> str:
        return si(value)

    def bytes_per_s(value: float, _pos: Any) -> str:
        return si(value, "B/s")

    def percent(value: float, _pos: Any) -> str:
        return f"{value * 100:.0f}%"

    def seconds(value: float, _pos: Any) -> str:
        if value == 0:
            return "0"
        return f"{value * 1000:.3g} ms" if abs(value) < 1 else f"{value:.3g} s"

    return {"Bps": bytes_per_s, "percentunit": percent, "s": seconds}.get(unit, short)


def draw(dashboard: dict[str, Any], series: dict[int, list[tuple[str, np.ndarray, np.ndarray]]],
         start: float, end: float, out: Path, note: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    panels = dashboard["panels"]
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)
    width_in, unit_in, header_in, footer_in = 16.0, 0.38, 0.6, 0.45
    height_in = header_in + rows * unit_in + footer_in
    plt.rcParams.update({"font.size": 8, "text.color": TEXT, "axes.labelcolor": TEXT,
                         "xtick.color": TEXT, "ytick.color": TEXT})
    fig = plt.figure(figsize=(width_in, height_in), facecolor=BACKGROUND)
    fx, fy = 1 / width_in, 1 / height_in  # inches -> figure fractions
    fig.text(0.2 * fx, 1 - 0.3 * fy, dashboard["title"], fontsize=14, color="#ffffff", va="center")
    span = f"{datetime.fromtimestamp(start):%H:%M:%S} to {datetime.fromtimestamp(end):%H:%M:%S}"
    fig.text(2.0 * fx, 1 - 0.3 * fy, f"Data source: Prometheus    Job: All    {span}", fontsize=9,
             color="#9fa7b3", va="center")
    fig.text(0.2 * fx, 0.22 * fy, note, fontsize=7.5, color="#9fa7b3", va="center", linespacing=1.5)
    gap = 0.08  # inches between panels
    for panel in panels:
        g = panel["gridPos"]
        left, width = g["x"] / 24 * width_in + gap, g["w"] / 24 * width_in - 2 * gap
        top = height_in - header_in - g["y"] * unit_in - gap
        height = g["h"] * unit_in - 2 * gap
        if panel["type"] == "row":  # a header line over the panels below it
            fig.text((left + 0.05) * fx, (top - height / 2) * fy, panel["title"], fontsize=11,
                     color="#ffffff", va="center", weight="bold")
            continue
        fig.add_artist(Rectangle((left * fx, (top - height) * fy), width * fx, height * fy,
                                 transform=fig.transFigure, facecolor=PANEL, edgecolor=BORDER, lw=0.8,
                                 zorder=-1))
        fig.text((left + 0.1) * fx, (top - 0.16) * fy, panel["title"], fontsize=9.5, color="#ffffff",
                 va="center", weight="bold")
        lines = series[panel["id"]]
        legend_rows = math.ceil(len(lines) / max(1, int(width // 2.0))) if lines else 0
        legend_in = 0.18 * legend_rows + 0.05
        ax_left, ax_bottom = left + 0.62, top - height + 0.3 + legend_in
        ax = fig.add_axes((ax_left * fx, ax_bottom * fy, (left + width - 0.12 - ax_left) * fx,
                           (top - 0.34 - ax_bottom) * fy), facecolor=PANEL)
        defaults = panel["fieldConfig"]["defaults"]
        for i, (name, times, values) in enumerate(lines):
            stamps = mdates.date2num([datetime.fromtimestamp(t) for t in times])
            ax.plot(stamps, values, color=PALETTE[i % len(PALETTE)], lw=1.2, label=name)
            ax.fill_between(stamps, values, color=PALETTE[i % len(PALETTE)], alpha=0.08, lw=0)
        if not lines:
            ax.text(0.5, 0.5, "No data", transform=ax.transAxes, ha="center", va="center", color="#9fa7b3")
        ax.set_xlim(mdates.date2num(datetime.fromtimestamp(start)), mdates.date2num(datetime.fromtimestamp(end)))
        low = defaults.get("min")
        high = defaults.get("max")
        if high is None:
            peak = max((float(np.nanmax(v)) for _, _, v in lines if np.isfinite(v).any()), default=1.0)
            high = peak * 1.1 if peak > 0 else 1.0
        ax.set_ylim(low if low is not None else None, high)
        ax.yaxis.set_major_formatter(FuncFormatter(formatter(defaults.get("unit", "short"))))
        ax.yaxis.set_major_locator(MaxNLocator(5, integer=defaults.get("decimals") == 0))
        ax.xaxis.set_major_locator(mdates.SecondLocator(bysecond=range(0, 60, 30)))
        ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S"))
        axis_label = defaults.get("custom", {}).get("axisLabel", "")
        if axis_label:
            ax.set_ylabel(axis_label, fontsize=7.5, color="#9fa7b3")
        ax.grid(True, color=GRID, lw=0.6)
        for spine in ax.spines.values():
            spine.set_visible(False)
        ax.tick_params(length=0, labelsize=7.5)
        if lines:
            ax.legend(loc="upper left", bbox_to_anchor=(-0.02, -0.11), ncol=max(1, int(width // 2.0)),
                      frameon=False, fontsize=7.5, handlelength=1.2, columnspacing=1.2,
                      labelcolor=TEXT, borderaxespad=0)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110, facecolor=BACKGROUND)
    log.info("wrote %s", out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=120.0, help="length of the workload")
    parser.add_argument("--rate-interval", default="10s", help="what $__rate_interval stands for")
    parser.add_argument("--step", type=float, default=1.0, help="query_range step, seconds")
    parser.add_argument("--prometheus", default=shutil.which("prometheus") or "prometheus")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--save", type=Path, help="also write the queried series to this JSON file")
    parser.add_argument("--replot", type=Path, help="draw from a --save file instead of running")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("shardstream").setLevel(logging.WARNING)  # the ranks' reconnect notices
    dashboard = json.loads(DASHBOARD.read_text())
    if args.replot:
        saved = json.loads(args.replot.read_text())
        draw(dashboard, {int(k): [(n, np.array(t), np.array(v)) for n, t, v in lines]
                         for k, lines in saved["series"].items()},
             saved["start"], saved["end"], args.out, saved["note"])
        return 0
    version = subprocess.run([args.prometheus, "--version"], capture_output=True, text=True,
                             check=True).stdout
    version = "Prometheus " + version.split("version ", 1)[1].split()[0]
    with tempfile.TemporaryDirectory(prefix="render-dashboard-") as tmp:
        work = Path(tmp)
        write_dataset(work / "data")
        metrics_port, prometheus_port = free_port(), free_port()
        with serve(work, metrics_port) as service, \
                prometheus(args.prometheus, work, metrics_port, prometheus_port):
            address = f"127.0.0.1:{(work / 'service.port').read_text().strip()}"
            time.sleep(3)  # a few scrapes before the workload
            start = time.time()
            workload(address, str(work / "data"), work, service.pid, args.seconds)
            end = time.time()
            time.sleep(3)  # the last scrapes
            series: dict[int, list[tuple[str, np.ndarray, np.ndarray]]] = {}
            for panel in dashboard["panels"]:
                if panel["type"] == "row":
                    continue
                series[panel["id"]] = []
                for target in panel["targets"]:
                    expr = substitute(target["expr"], args.rate_interval)
                    for result in query_range(prometheus_port, expr, start - 5, end, args.step):
                        points = np.array(result["values"], dtype=float).reshape(-1, 2)
                        name = legend(target.get("legendFormat", ""), result["metric"])
                        series[panel["id"]].append((name, points[:, 0], points[:, 1]))
                log.info("%s: %d series", panel["title"], len(series[panel["id"]]))
    note = (f"Not a Grafana screenshot: each panel's PromQL from deploy/grafana/shardstream-dashboard.json, "
            f"evaluated by {version} (query_range, step {args.step:g} s, $__rate_interval = "
            f"{args.rate_interval}), drawn by deploy/grafana/render_dashboard.py.\n"
            f"A {args.seconds:.0f} s local run scraped every 1 s: 2 decode actors on 2 cores; job 'train' "
            f"(4 ranks); job 'sweep' (2 ranks) joins at {0.45 * args.seconds:.0f} s; one decode actor "
            f"is killed at {0.65 * args.seconds:.0f} s; a client asks for a missing dataset at "
            f"{0.3 * args.seconds:.0f} s and {0.8 * args.seconds:.0f} s (an error code's first "
            f"occurrence creates its series, which rate() sees from the second on).")
    if args.save:
        args.save.write_text(json.dumps({
            "start": start - 5, "end": end, "note": note,
            "series": {k: [(n, t.tolist(), v.tolist()) for n, t, v in lines] for k, lines in series.items()}}))
    draw(dashboard, series, start - 5, end, args.out, note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
