"""The PNG chart of a run: samples/s and consumer CPU per 1000 samples, side by side."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.report import SYSTEM_LABELS


def write_chart(results: dict[str, Any], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    systems = [(name, e) for name, e in results["systems"].items() if e["status"] == "ok"]
    labels = [SYSTEM_LABELS.get(name, name) for name, _ in systems]
    rate = [e["median"]["samples_per_s"] for _, e in systems]
    cpu_self = [e["median"]["cpu_self_per_1k"] for _, e in systems]
    cpu_children = [e["median"]["cpu_children_per_1k"] for _, e in systems]
    colors = ["#d62728" if name == "shardstream" else "#7f7f7f" for name, _ in systems]

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
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
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


__all__ = ["write_chart"]
