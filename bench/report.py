"""The benchmark's human-readable output: the systems table, the transport table, the verdict.

Tables are Markdown, so the same text reads well in a terminal and pastes
into docs/benchmarks.md.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from bench.decode_limit import limit_text
from bench.floors import floor_text
from bench.stats import spread
from bench.transport_figures import KINDS, batch_label, batch_sizes, figures

SYSTEM_LABELS = {"shardstream": "shardstream", "dataloader": "torch DataLoader",
                 "raydata": "Ray Data", "tfdata": "tf.data service", "spdl": "SPDL"}
TRANSPORT_LABELS = {"shardstream": "shardstream", "shardstream_grpc": "shardstream gRPC stream",
                    "shardstream_shm": "shardstream shared memory",
                    "grpc_raw": "raw gRPC", "tcp_raw": "raw TCP"}


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(c)) for c in column) for column in zip(header, *rows, strict=True)]

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|",
                      *(line(r) for r in rows)])


def _num(value: Any, spec: str) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    return format(value, spec)


def short_reason(reason: str, width: int = 80) -> str:
    """The line of a failure that says most (the last: the exception), cut to `width`."""
    lines = [line.strip() for line in reason.splitlines() if line.strip()]
    text = lines[-1] if lines else ""
    return text if len(text) <= width else text[: width - 3] + "..."


def systems_table(results: dict[str, Any]) -> str:
    header = ["system", "samples/s (min-max)", "MB/s", "1st batch s", "consumer CPU-s/1k",
              "+ children", "server CPU-s/1k", "peak RSS MB", "RSS growth MB", "stall",
              "other load"]
    rows = []
    for name, entry in results["systems"].items():
        label = SYSTEM_LABELS.get(name, name)
        if entry["status"] != "ok":
            rows.append([label, f"{entry['status']}: {short_reason(entry.get('reason', ''))}",
                         *[""] * 9])
            continue
        rows.append(_system_row(label, entry))
        for variant, suffix in (("network_path", "network path"), ("prepared_cache", "prepared cache warm"),
                                ("second_job_first", "new job's 1st epoch, another running"),
                                ("second_job_warm", "new job's warm epoch, another running"),
                                ("cache_decoded", ".cache() after decode, warm")):
            if entry.get(variant, {}).get("median"):
                rows.append(_system_row(f"{label}, {suffix}", entry[variant]))
    return markdown_table(header, rows)


def _system_row(label: str, entry: dict[str, Any]) -> list[str]:
    m = entry["median"]
    low, high = spread(entry["runs"], "samples_per_s")
    return [
        label,
        f"{_num(m['samples_per_s'], ',.0f')} ({_num(low, ',.0f')}-{_num(high, ',.0f')})",
        _num(m["mb_per_s"], ",.0f"),
        _num(m["ttfb_s"], ".2f"),
        _num(m["cpu_self_per_1k"], ".3f"),
        _num(m["cpu_children_per_1k"], ".3f"),
        (_num(m.get("server_cpu_per_1k"), ".3f") if "server_cpu_per_1k" in m else "-")
        + (f" (cache verify {_num(m['cache_verify_cpu_per_1k'], '.4f')})" if "cache_verify_cpu_per_1k" in m else "")
        + (f" (cache keep {_num(m['cache_keep_cpu_per_1k'], '.3f')})" if "cache_keep_cpu_per_1k" in m else ""),
        _num(m["rss_peak_mb"], ",.0f"),
        _num(m["rss_growth_mb"], ",.0f"),
        _num(m["stall_fraction"] * 100, ".0f") + "%",
        _num(m.get("foreign_load_cores"), ".2f") if "foreign_load_cores" in m else "-",
    ]


def transport_table(results: dict[str, Any]) -> str:
    """GB/s of each kind, then CPU-s per GB of the consumer and of the sender, beside raw gRPC's."""
    transport = results.get("transport") or {}
    if transport.get("status") != "ok":
        reason = short_reason(transport.get("reason", "")) or "not run"
        return f"transport microbenchmark {transport.get('status', 'not run')}: {reason}"
    header = ["batch", *(f"{TRANSPORT_LABELS[k]} GB/s" for k in KINDS), "shardstream / raw gRPC",
              "consumer CPU-s/GB (raw gRPC)", "sender CPU-s/GB (raw gRPC)"]
    rows = []
    for batch_rows, nbytes in batch_sizes(results):
        got = {kind: figures(results, kind, batch_rows) for kind in KINDS}
        gbps = {kind: f.gbps if f else math.nan for kind, f in got.items()}
        ours, raw = got["shardstream"], got["grpc_raw"]
        ratio = gbps["shardstream"] / gbps["grpc_raw"] if gbps["grpc_raw"] else math.nan
        rows.append([
            f"{batch_label(nbytes)} ({batch_rows} rows)", *(_num(gbps[k], ".2f") for k in KINDS),
            _num(ratio, ".2f") + "x",
            f"{_num(ours and ours.consumer_cpu_per_gb, '.2f')} ({_num(raw and raw.consumer_cpu_per_gb, '.2f')})",
            f"{_num(ours and ours.sender_cpu_per_gb, '.2f')} ({_num(raw and raw.sender_cpu_per_gb, '.2f')})",
        ])
    return markdown_table(header, rows)


def targets_text(targets: Sequence[dict[str, Any]]) -> str:
    lines = []
    width = max((len(t["name"]) for t in targets), default=0)
    for t in targets:
        unit = t["unit"]
        value = _num(t["value"], ".2f")
        value = value if value == "n/a" else (value + unit if unit == "x" else f"{value} {unit}")
        bound = f"{t['threshold']:.2f}{unit}" if unit == "x" else f"{_num(t['threshold'], '.2f')} {unit}"
        lines.append(f"{t['status']:<4}  {t['name']:<{width}}  {value:>10}  ({t['op']} {bound})  "
                     f"{t['detail']}")
    return "\n".join(lines)


def service_text(results: dict[str, Any]) -> str:
    service = results["systems"].get("shardstream", {}).get("service")
    if not service:
        return ""
    return (f"shardstream service: started in {service['start_s']:.1f} s with "
            f"{int(service['num_decoders'])} decode actor(s); first batch of the first job on the "
            f"fresh service {service['ttfb_cold_s']:.2f} s (medians over the rounds)")


def paired_text(results: dict[str, Any]) -> str:
    """shardstream's samples/s over each other system's, round by round.

    Rounds are interleaved, so a round's two figures were taken minutes apart on
    the same machine: their ratio cancels the machine's drift between rounds,
    which moves every system alike. Needs one run per round for both systems.
    """
    systems = results["systems"]
    ours = systems.get("shardstream", {})
    rounds = results["config"].get("repetitions")
    if ours.get("status") != "ok" or rounds is None or len(ours["runs"]) != rounds or rounds < 2:
        return ""
    lines = ["shardstream / other system, samples/s round by round (each round measures both):"]
    for name, entry in systems.items():
        if name == "shardstream" or entry.get("status") != "ok" or len(entry["runs"]) != rounds:
            continue
        ratios = [a["samples_per_s"] / b["samples_per_s"] for a, b in zip(ours["runs"], entry["runs"], strict=True)]
        lines.append(f"  {SYSTEM_LABELS.get(name, name)}: {' '.join(f'{r:.2f}' for r in ratios)} "
                     f"(median {statistics.median(ratios):.2f}x)")
    return "\n".join(lines) if len(lines) > 1 else ""


def header_text(results: dict[str, Any]) -> str:
    machine = results["machine"]
    versions = machine["versions"]
    workload = results["workload"]
    libs = ", ".join(f"{k} {v}" for k, v in versions.items())
    return (f"{results['date']}  {machine['cores']} cores ({machine['cpu_model']}), "
            f"{machine['memory_gib']} GiB, GPU: {'yes' if machine['gpu'] else 'no'}, "
            f"revision {machine['revision']}\n{libs}\n"
            f"workload {workload['name']}: {workload['samples']:,} JPEGs "
            f"{workload['image_size']}x{workload['image_size']} (mean {workload['mean_jpeg_kb']:.1f} KB), "
            f"batch {results['config']['batch_size']}, crop {results['config']['crop']}, "
            f"{results['config']['repetitions']} repetition(s), medians")


def full_report(results: dict[str, Any]) -> str:
    parts = [header_text(results), "", systems_table(results)]
    service = service_text(results)
    if service:
        parts += ["", service]
    paired = paired_text(results)
    if paired:
        parts += ["", paired]
    limit = limit_text(results)
    if limit:
        parts += ["", limit]
    parts += ["", transport_table(results), "", targets_text(results["targets"])]
    floor = floor_text(results)
    if floor:
        parts += ["", floor]
    return "\n".join(parts)


__all__ = ["full_report", "markdown_table", "paired_text", "short_reason", "systems_table", "targets_text",
           "transport_table"]
