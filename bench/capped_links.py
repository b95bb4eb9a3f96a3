"""One rank pulling from 1, 2, 3 decode hosts whose links are capped, on separate hosts.

    python -m bench.capped_links [--mbit 300] [--hosts 3] [--seconds 12] [--rows 4000] [--prefetch 16]

Hosts are network namespaces on a bridge (tests/multihost/hosts.py, root needed): a head
(`ray start --head`, `shardstream serve`), a trainer (the rank, its link uncapped) and up to
`--hosts` decode hosts, each link capped at `--mbit` both ways with a token bucket. The rank
(bench.link_consumer) pulls shuffled epochs of 64 kB rows for `--seconds` with 1, 2, ... decode
hosts joined, one `ray start` at a time; then, with all but one joined, the last joins in the
middle of a run. Printed: each run's delivered MB/s against the sum of the caps (target >= 0.9x),
the bytes the head's link sent against those delivered (target <= 1%), the rate before and after
the host joined mid-epoch, and whether every whole epoch equalled DistributedSampler's batches.
Beside them, what the machine itself allowed (bench/host_cpu.py): how busy its cores were over
the steady seconds, the CPU-seconds per GB delivered of the decode actors, the raylets, the rank
and the kernel's network work (softirq), and the MB/s the cores could carry at that cost. The
namespaces share the machine's cores: a shortfall with the cores saturated is the machine's, and
the verdict says so. Results go to bench/results/capped-links-<time>.json, and a chart of
samples/s against decode hosts beside it (.png).
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bench.chart import write_links_chart
from bench.config import RESULTS_DIR
from bench.host_cpu import ROLES, CpuSampler, saturation
from bench.machine import load_average, machine_info
from tests.datasets import write_indexed
from tests.multihost.hosts import Host, Network, usable

log = logging.getLogger(__name__)
BIN = Path(sys.executable).parent
FEATURES = 16384  # float32: 64 kB a row, 1 MiB a batch of 16
RATIO_TARGET, HEAD_SHARE_TARGET = 0.9, 0.01
SATURATED = 0.9  # the cores' busy share from which a shortfall is the machine's, not the links'
# The rank's window in batches (1 MiB each). A decoder keeps its link busy only with a batch queued
# behind the one on the wire, and the window also holds batches that arrived out of order: at
# 300 Mbit/s a host about 3 of them (8 for three hosts gave 0.85-0.90x, 16 0.90-0.93x: scaling.md).
DEFAULT_PREFETCH = 16
STEADY_FROM_S = 2  # the consumer's first seconds are start-up


def _ray_start(host: Host, *args: str) -> None:
    done = host.run([str(BIN / "ray"), "start", *args, f"--node-ip-address={host.ip}",
                     f"--temp-dir=/tmp/ss-{host.netns[-12:]}", f"--object-store-memory={80 * 2**20}"], timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"ray start on {host.name} failed:\n{(done.stdout + done.stderr)[-2000:]}")


def _decoders(trainer: Host, address: str) -> str:
    return trainer.run([str(BIN / "shardstream"), "status", address], timeout=30).stdout


def _wait_for(trainer: Host, address: str, count: int, deadline_s: float = 120) -> None:
    deadline = time.monotonic() + deadline_s
    while f"{count} decoder(s) on {count} node(s)" not in _decoders(trainer, address):
        if time.monotonic() > deadline:
            raise RuntimeError(f"not {count} decoders within {deadline_s} s")
        time.sleep(1)


def _consume(trainer: Host, address: str, data: Path, rows: int, seconds: float, out: Path,
             prefetch: int) -> dict[str, Any]:
    """The consumer's counts, and the CPU of every host by role over its steady seconds."""
    with CpuSampler([h.netns for h in trainer.network.hosts.values()]) as sampler:
        done = trainer.run([sys.executable, "-m", "bench.link_consumer", address, str(data), str(rows),
                            str(seconds), str(out), str(prefetch)], timeout=seconds + 180,
                           env={"OMP_NUM_THREADS": "1"})
    if done.returncode != 0:
        raise RuntimeError(f"consumer failed:\n{(done.stdout + done.stderr)[-3000:]}")
    result: dict[str, Any] = json.loads(out.read_text())
    per_second, started = result["bytes_per_second"], result["started_monotonic"]
    first, last = STEADY_FROM_S, len(per_second) - 1  # the seconds _steady_mb_s takes
    cpu = sampler.window(started + first, started + last)
    if cpu is not None:
        steady_gb = sum(per_second[first:last]) / 1e9
        cpu["steady_gb"] = steady_gb
        cpu["saturation"] = saturation(cpu)
    result["cpu"] = cpu
    return result



def _steady(per_second: list[int]) -> float:
    """The median over whole seconds, the first two (start-up) and the last (partial) left out."""
    return float(statistics.median(per_second[STEADY_FROM_S:-1] or per_second))


def _steady_mb_s(per_second: list[int]) -> float:
    return _steady(per_second) / 1e6


def _run_record(n: int, cap_mb_s: float, result: dict[str, Any], head_sent: int, load: float) -> dict[str, Any]:
    return {"decode_hosts": n, "caps_mb_s": n * cap_mb_s, "mb_s": _steady_mb_s(result["bytes_per_second"]),
            "samples_per_s": _steady(result["samples_per_second"]),
            "delivered_bytes": sum(result["bytes_per_second"]), "head_sent_bytes": head_sent,
            "epochs_checked": result["epochs_checked"], "mismatches": result["mismatches"],
            "epoch_gap_s": result["epoch_gap_s"], "cpu": result["cpu"], "load_1m_before": load}


def run(mbit: float, hosts: int, seconds: float, rows: int, prefetch: int = DEFAULT_PREFETCH) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="ss-capped-"))
    data = root / "data"
    write_indexed(str(data), [rows // 2, rows - rows // 2], row_group_size=16, features=FEATURES)
    names = ["head", "trainer", *(f"decode-{i}" for i in range(1, hosts + 1))]
    cap_mb_s = mbit / 8
    machine = machine_info()
    runs: list[dict[str, Any]] = []
    with Network(names, root) as net:
        head, trainer = net["head"], net["trainer"]
        decode = [net[f"decode-{i}"] for i in range(1, hosts + 1)]
        for host in decode:
            host.limit(mbit)
        _ray_start(head, "--head", "--port=6379", "--num-cpus=0", "--include-dashboard=false")
        address = f"{head.ip}:50051"
        head.start([str(BIN / "shardstream"), "serve", "--host", "0.0.0.0", "--port", "50051", "--ray-address",
                    f"{head.ip}:6379"], "serve.log")
        join = [f"--address={head.ip}:6379", '--resources={"decode": 1}', "--num-cpus=1"]
        for n, host in enumerate(decode[:-1] if hosts > 1 else decode, start=1):
            _ray_start(host, *join)
            _wait_for(trainer, address, n)
            head_before, load = head.sent_bytes(), load_average()
            result = _consume(trainer, address, data, rows, seconds, root / f"run-{n}.json", prefetch)
            runs.append(_run_record(n, cap_mb_s, result, head.sent_bytes() - head_before, load))
            log.info("%d decode host(s): %.1f MB/s", n, runs[-1]["mb_s"])
        added: dict[str, Any] = {}
        if hosts > 1:  # the last host joins in the middle of a run
            joined_at: list[float] = []

            def join_late() -> None:
                time.sleep(seconds / 3)
                _ray_start(decode[-1], *join)
                joined_at.append(time.monotonic() - started)

            started = time.monotonic()
            joiner = threading.Thread(target=join_late)
            joiner.start()
            result = _consume(trainer, address, data, rows, 2 * seconds, root / "run-added.json", prefetch)
            joiner.join()
            per_second = result["bytes_per_second"]
            at = int(joined_at[0])
            before = per_second[2:at] or per_second[:at]
            after = per_second[-int(seconds / 2) - 1:-1]
            added = {"joined_at_s": joined_at[0], "mb_s_before": statistics.median(before) / 1e6,
                     "mb_s_after": statistics.median(after) / 1e6, "per_second_mb": [b / 1e6 for b in per_second],
                     "epochs_checked": result["epochs_checked"], "mismatches": result["mismatches"]}
            _wait_for(trainer, address, hosts)
            head_before, load = head.sent_bytes(), load_average()
            result = _consume(trainer, address, data, rows, seconds, root / f"run-{hosts}.json", prefetch)
            runs.append(_run_record(hosts, cap_mb_s, result, head.sent_bytes() - head_before, load))
    return {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "machine": machine, "mbit": mbit,
            "rows": rows, "row_bytes": FEATURES * 4, "batch_size": 16, "prefetch": prefetch, "seconds": seconds,
            "runs": runs, "added": added}


def _per_gb(cpu: dict[str, float], role: str) -> float:
    return cpu[role] / cpu["steady_gb"] if cpu["steady_gb"] else 0.0


def cpu_ceiling_mb_s(cpu: dict[str, float]) -> float:
    """The MB/s this machine's cores could carry at the run's CPU cost per byte: every core busy
    with the hosts' processes and the kernel's network work (softirq), nothing else running."""
    ours = sum(_per_gb(cpu, role) for role in ROLES if role != "other")
    return cpu["cores"] / ours * 1e3 if ours else float("inf")


def report(results: dict[str, Any]) -> list[str]:
    lines = ["| decode hosts | caps MB/s | delivered MB/s | samples/s | ratio | head sent / delivered | "
             "machine busy | CPU-s per GB: decoders / raylets / rank / softirq | CPU ceiling MB/s | epochs checked |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    verdicts = []
    for r in results["runs"]:
        ratio = r["mb_s"] / r["caps_mb_s"]
        share = r["head_sent_bytes"] / max(r["delivered_bytes"], 1)
        cpu = r["cpu"]
        if cpu:
            busy = f"{cpu['saturation']:.0%}"
            per_gb = " / ".join(f"{_per_gb(cpu, role):.2f}" for role in ("decoders", "raylets", "rank", "softirq"))
            ceiling = f"{cpu_ceiling_mb_s(cpu):.0f}"
        else:
            busy = per_gb = ceiling = "-"
        lines.append(f"| {r['decode_hosts']} | {r['caps_mb_s']:.1f} | {r['mb_s']:.1f} | {r['samples_per_s']:.0f} | "
                     f"{ratio:.2f}x | {share:.3%} | {busy} | {per_gb} | {ceiling} | "
                     f"{r['epochs_checked']} ({r['mismatches']} mismatched) |")
        bound = ""
        if ratio < RATIO_TARGET and cpu and cpu["saturation"] >= SATURATED:
            bound = f" (the cores were {cpu['saturation']:.0%} busy: this machine's ceiling, not the links')"
        verdicts.append(("PASS" if ratio >= RATIO_TARGET else "FAIL")
                        + f": {r['decode_hosts']} host(s) {ratio:.2f}x the caps (target {RATIO_TARGET}x){bound}")
        verdicts.append(("PASS" if share <= HEAD_SHARE_TARGET else "FAIL")
                        + f": head sent {share:.3%} of the bytes delivered (target <= {HEAD_SHARE_TARGET:.0%})")
    added = results["added"]
    if added:
        raised = added["mb_s_after"] > 1.2 * added["mb_s_before"]
        verdicts.append(("PASS" if raised else "FAIL") + f": a host joined at {added['joined_at_s']:.0f} s "
                        f"raised {added['mb_s_before']:.1f} -> {added['mb_s_after']:.1f} MB/s")
    mismatched = sum(r["mismatches"] for r in results["runs"]) + added.get("mismatches", 0)
    verdicts.append(("PASS" if not mismatched else "FAIL") + f": {mismatched} epoch(s) differed from "
                    "DistributedSampler's batches")
    loads = ", ".join(f"{r['load_1m_before']:.2f}" for r in results["runs"])
    notes = [f"load average (1 min) before each run: {loads}; prefetch {results['prefetch']} batches of "
             f"{results['batch_size'] * results['row_bytes'] / 2**20:.0f} MiB",
             "machine busy: all cores' busy share over the steady seconds (anyone's work); CPU ceiling: "
             "the cores / the CPU-s per GB of the hosts' processes and softirq"]
    return [*lines, "", *notes, "", *verdicts]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mbit", type=float, default=300.0)
    parser.add_argument("--hosts", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=12.0)
    # 4,000 rows of 64 kB: epochs of 2.3 s at three hosts. Epochs of under a second (1,500 rows)
    # measured each epoch's restart (34-45 ms) more than the links: 0.87-0.93x there.
    parser.add_argument("--rows", type=int, default=4000)
    parser.add_argument("--prefetch", type=int, default=DEFAULT_PREFETCH, help="the rank's window in batches")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    why = usable()
    if why is not None:
        log.error("cannot make separate hosts here: %s", why)
        return 2
    results = run(args.mbit, args.hosts, args.seconds, args.rows, args.prefetch)
    lines = report(results)
    sys.stdout.write("\n".join(lines) + "\n")
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"capped-links-{stamp}.json"
    path.write_text(json.dumps({**results, "report": lines}, indent=1))
    chart = write_links_chart(results, path.with_suffix(".png"))
    log.info("results: %s, chart: %s", path, chart)
    return 0 if not any(line.startswith("FAIL") for line in lines) else 1


if __name__ == "__main__":
    sys.exit(main())
