"""One rank pulling from 1, 2, 3 decode hosts whose links are capped, on separate hosts.

    python -m bench.capped_links [--mbit 300] [--hosts 3] [--seconds 12] [--rows 1500]

Hosts are network namespaces on a bridge (tests/multihost/hosts.py, root needed): a head
(`ray start --head`, `shardstream serve`), a trainer (the rank, its link uncapped) and up to
`--hosts` decode hosts, each link capped at `--mbit` both ways with a token bucket. The rank
(bench.link_consumer) pulls shuffled epochs of 64 kB rows for `--seconds` with 1, 2, ... decode
hosts joined, one `ray start` at a time; then, with all but one joined, the last joins in the
middle of a run. Printed: each run's delivered MB/s against the sum of the caps (target >= 0.9x),
the bytes the head's link sent against those delivered (target <= 1%), the rate before and after
the host joined mid-epoch, and whether every whole epoch equalled DistributedSampler's batches.
Results go to bench/results/capped-links-<time>.json.
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

from bench.config import RESULTS_DIR
from tests.datasets import write_indexed
from tests.multihost.hosts import Host, Network, usable

log = logging.getLogger(__name__)
BIN = Path(sys.executable).parent
FEATURES = 16384  # float32: 64 kB a row, 1 MiB a batch of 16
RATIO_TARGET, HEAD_SHARE_TARGET = 0.9, 0.01


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


def _consume(trainer: Host, address: str, data: Path, rows: int, seconds: float, out: Path) -> dict[str, Any]:
    done = trainer.run([sys.executable, "-m", "bench.link_consumer", address, str(data), str(rows), str(seconds),
                        str(out)], timeout=seconds + 180, env={"OMP_NUM_THREADS": "1"})
    if done.returncode != 0:
        raise RuntimeError(f"consumer failed:\n{(done.stdout + done.stderr)[-3000:]}")
    return json.loads(out.read_text())  # type: ignore[no-any-return]


def _steady_mb_s(per_second: list[int]) -> float:
    """Median MB/s over whole seconds, the first two (start-up) and the last (partial) left out."""
    steady = per_second[2:-1] or per_second
    return statistics.median(steady) / 1e6


def run(mbit: float, hosts: int, seconds: float, rows: int) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="ss-capped-"))
    data = root / "data"
    write_indexed(str(data), [rows // 2, rows - rows // 2], row_group_size=16, features=FEATURES)
    names = ["head", "trainer", *(f"decode-{i}" for i in range(1, hosts + 1))]
    cap_mb_s = mbit / 8
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
            head_before = head.sent_bytes()
            result = _consume(trainer, address, data, rows, seconds, root / f"run-{n}.json")
            head_sent = head.sent_bytes() - head_before
            delivered = sum(result["bytes_per_second"])
            runs.append({"decode_hosts": n, "caps_mb_s": n * cap_mb_s,
                         "mb_s": _steady_mb_s(result["bytes_per_second"]), "delivered_bytes": delivered,
                         "head_sent_bytes": head_sent, "epochs_checked": result["epochs_checked"],
                         "mismatches": result["mismatches"]})
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
            result = _consume(trainer, address, data, rows, 2 * seconds, root / "run-added.json")
            joiner.join()
            per_second = result["bytes_per_second"]
            at = int(joined_at[0])
            before = per_second[2:at] or per_second[:at]
            after = per_second[-int(seconds / 2) - 1:-1]
            added = {"joined_at_s": joined_at[0], "mb_s_before": statistics.median(before) / 1e6,
                     "mb_s_after": statistics.median(after) / 1e6, "per_second_mb": [b / 1e6 for b in per_second],
                     "epochs_checked": result["epochs_checked"], "mismatches": result["mismatches"]}
            _wait_for(trainer, address, hosts)
            head_before = head.sent_bytes()
            result = _consume(trainer, address, data, rows, seconds, root / f"run-{hosts}.json")
            runs.append({"decode_hosts": hosts, "caps_mb_s": hosts * cap_mb_s,
                         "mb_s": _steady_mb_s(result["bytes_per_second"]),
                         "delivered_bytes": sum(result["bytes_per_second"]),
                         "head_sent_bytes": head.sent_bytes() - head_before,
                         "epochs_checked": result["epochs_checked"], "mismatches": result["mismatches"]})
    return {"mbit": mbit, "rows": rows, "row_bytes": FEATURES * 4, "seconds": seconds, "runs": runs, "added": added}


def report(results: dict[str, Any]) -> list[str]:
    lines = ["| decode hosts | caps MB/s | delivered MB/s | ratio | head sent / delivered | epochs checked |",
             "|---|---|---|---|---|---|"]
    verdicts = []
    for r in results["runs"]:
        ratio = r["mb_s"] / r["caps_mb_s"]
        share = r["head_sent_bytes"] / max(r["delivered_bytes"], 1)
        lines.append(f"| {r['decode_hosts']} | {r['caps_mb_s']:.1f} | {r['mb_s']:.1f} | {ratio:.2f}x | "
                     f"{share:.3%} | {r['epochs_checked']} ({r['mismatches']} mismatched) |")
        verdicts.append(("PASS" if ratio >= RATIO_TARGET else "FAIL")
                        + f": {r['decode_hosts']} host(s) {ratio:.2f}x the caps (target {RATIO_TARGET}x)")
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
    return [*lines, "", *verdicts]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mbit", type=float, default=300.0)
    parser.add_argument("--hosts", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=12.0)
    parser.add_argument("--rows", type=int, default=1500)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    why = usable()
    if why is not None:
        log.error("cannot make separate hosts here: %s", why)
        return 2
    results = run(args.mbit, args.hosts, args.seconds, args.rows)
    lines = report(results)
    sys.stdout.write("\n".join(lines) + "\n")
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"capped-links-{stamp}.json"
    path.write_text(json.dumps({**results, "report": lines}, indent=1))
    log.info("results: %s", path)
    return 0 if not any(line.startswith("FAIL") for line in lines) else 1


if __name__ == "__main__":
    sys.exit(main())
