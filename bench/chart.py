"""PNG charts: a run's samples/s and consumer CPU per 1000 samples side by side; a scaling run's
samples/s against the number of decode nodes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.report import SYSTEM_LABELS


def _pyplot() -> Any:
    """matplotlib's pyplot drawing to files only (no display here)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    _pyplot().close(fig)
    return path


def write_chart(results: dict[str, Any], path: Path) -> Path:
    systems = [(name, e) for name, e in results["systems"].items() if e["status"] == "ok"]
    labels = [SYSTEM_LABELS.get(name, name) for name, _ in systems]
    rate = [e["median"]["samples_per_s"] for _, e in systems]
    cpu_self = [e["median"]["cpu_self_per_1k"] for _, e in systems]
    cpu_children = [e["median"]["cpu_children_per_1k"] for _, e in systems]
    colors = ["#d62728" if name == "shardstream" else "#7f7f7f" for name, _ in systems]

    fig, (left, right) = _pyplot().subplots(1, 2, figsize=(11, 4.2))
    bars = left.bar(labels, rate, color=colors)
    left.bar_label(bars, labels=[f"{r:,.0f}" for r in rate], padding=2)
    left.set_title("throughput (samples/s, higher is better)")
    left.set_ylabel("samples/s")
    right.bar(labels, cpu_self, color=colors, label="consumer process")
    right.bar(labels, cpu_children, bottom=cpu_self, color="#c7c7c7", hatch="//",
              label="its child processes (workers)")
    for i, (a, b) in enumerate(zip(cpu_self, cpu_children, strict=True)):
        right.annotate(f"{a + b:.2f}", (i, a + b), ha="center", va="bottom")
    right.set_title("consumer CPU-s per 1000 samples (lower is better)")
    right.set_ylabel("CPU seconds")
    right.legend(loc="upper left", fontsize=8)
    for axis in (left, right):
        axis.tick_params(axis="x", labelsize=8)
        axis.margins(y=0.15)
    machine = results["machine"]
    fig.suptitle(f"{results['date'][:10]}, {machine['cores']} cores ({machine['cpu_model']}), "
                 f"batch {results['config']['batch_size']}, medians of "
                 f"{results['config']['repetitions']} round(s)", fontsize=9)
    return _save(fig, path)


def write_scaling_chart(result: dict[str, Any], path: Path) -> Path:
    """Aggregate samples/s against decode nodes, with the line each node's first-point rate would
    give if nodes added their full share (what separate machines approach; here they share cores)."""
    rows = result["rows"]
    nodes = [int(r["decoders"]) for r in rows]
    rate = [r["samples_per_s"] for r in rows]
    fig, axis = _pyplot().subplots(figsize=(6.5, 4.2))
    axis.plot(nodes, [rows[0]["per_actor"] * n for n in nodes], linestyle="--", color="#7f7f7f",
              label="linear from 1 node")
    axis.plot(nodes, rate, marker="o", color="#d62728", label="shardstream, one rank")
    for n, r in zip(nodes, rate, strict=True):
        axis.annotate(f"{r:,.0f}", (n, r), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=8)
    axis.set_xticks(nodes)
    axis.set_xlabel("decode nodes (1 actor, num_cpus=1 each)")
    axis.set_ylabel("samples/s")
    axis.set_ylim(bottom=0)
    axis.legend(fontsize=8)
    machine = result["machine"]
    axis.set_title(f"{result['date'][:10]}: every node shares {machine['cores']} cores with the consumer",
                   fontsize=9)
    return _save(fig, path)


def write_links_chart(result: dict[str, Any], path: Path) -> Path:
    """bench.capped_links: samples/s one rank received against decode hosts at separate addresses,
    beside the sum of the hosts' link caps (in samples) and the 0.9x target."""
    runs = result["runs"]
    hosts = [int(r["decode_hosts"]) for r in runs]
    rate = [r["samples_per_s"] for r in runs]
    sample_bytes = result["row_bytes"]
    caps = [r["caps_mb_s"] * 1e6 / sample_bytes for r in runs]
    fig, axis = _pyplot().subplots(figsize=(6.5, 4.2))
    axis.plot(hosts, caps, linestyle="--", color="#7f7f7f", label=f"sum of the link caps ({result['mbit']:.0f} Mbit/s "
              "a host)")
    axis.plot(hosts, [0.9 * c for c in caps], linestyle=":", color="#7f7f7f", label="0.9x the caps (target)")
    axis.plot(hosts, rate, marker="o", color="#d62728", label="shardstream, one rank")
    for n, r, run in zip(hosts, rate, runs, strict=True):
        busy = f", cores {run['cpu']['saturation']:.0%} busy" if run.get("cpu") else ""
        axis.annotate(f"{r:,.0f}\n{r / (run['caps_mb_s'] * 1e6 / sample_bytes):.2f}x{busy}", (n, r),
                      textcoords="offset points", xytext=(0, -26), ha="center", fontsize=8)
    axis.set_xticks(hosts)
    axis.set_xlim(min(hosts) - 0.5, max(hosts) + 0.5)
    axis.set_xlabel("decode hosts (own address and link, 1 decode actor each)")
    axis.set_ylabel(f"samples/s ({sample_bytes // 1024} KiB each)")
    axis.set_ylim(bottom=0)
    axis.legend(fontsize=8, loc="upper left")
    machine = result["machine"]
    axis.set_title(f"{result['date'][:16]}: hosts are network namespaces sharing {machine['cores']} cores; "
                   f"load {machine['load_average_1m_at_start']:.2f}", fontsize=9)
    return _save(fig, path)


__all__ = ["write_chart", "write_links_chart", "write_scaling_chart"]
