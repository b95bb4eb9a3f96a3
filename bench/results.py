"""The results document: one JSON file per run under bench/results/, and its schema.

    {
      "schema": "shardstream-bench/1", "date": ISO-8601, "command": str, "quick": bool,
      "config": {...BenchConfig...}, "machine": {cores, cpu_model, memory_gib, versions, ...},
      "workload": {name, samples, image_size, bytes_on_disk, mean_jpeg_bytes, ...},
      "systems": {NAME: {"status": "ok" | "skipped" | "failed", "reason": str, "notes": str,
                         "runs": [RunMetrics...], "median": {metric: median}, ...}},
      "transport": {"status": ..., "batch_rows": [64], "decoders": 2, "dataset": {row_bytes, ...},
                    "results": {"shardstream" | "grpc_raw" | "tcp_raw": {"64": {"runs", "median"}}}},
      "decode_limit": {"runs": [{decoder: CPU-s/1k}...], "cpu_per_1k": {decoder: median}} (with shardstream),
      "targets": [{name, status, value, op, threshold, unit, detail}], "all_passed": bool
    }
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SCHEMA = "shardstream-bench/1"
STATUSES = ("ok", "skipped", "failed")
TARGET_STATUSES = ("PASS", "FAIL", "SKIP")
TOP_LEVEL = ("schema", "date", "command", "quick", "config", "machine", "workload", "systems",
             "transport", "targets", "all_passed")
MACHINE = ("cores", "cpu_model", "memory_gib", "versions")
SYSTEM_METRICS = ("samples_per_s", "mb_per_s", "ttfb_s", "cpu_self_per_1k", "cpu_children_per_1k",
                  "cpu_total_per_1k", "rss_peak_mb", "rss_growth_mb", "stall_fraction")
TARGET_FIELDS = ("name", "status", "value", "op", "threshold", "unit", "detail")


def validate(results: dict[str, Any]) -> list[str]:
    """What is wrong with a results document; empty when it follows the schema."""
    problems = [f"missing top-level key {key!r}" for key in TOP_LEVEL if key not in results]
    if problems:
        return problems
    if results["schema"] != SCHEMA:
        problems.append(f"schema is {results['schema']!r}, expected {SCHEMA!r}")
    problems += [f"machine lacks {key!r}" for key in MACHINE if key not in results["machine"]]
    for name, entry in results["systems"].items():
        status = entry.get("status")
        if status not in STATUSES:
            problems.append(f"system {name!r}: status {status!r} not in {STATUSES}")
        elif status == "ok":
            if not entry.get("runs"):
                problems.append(f"system {name!r}: status ok but no runs")
            problems += [f"system {name!r}: median lacks {m!r}" for m in SYSTEM_METRICS
                         if m not in entry.get("median", {})]
        elif not entry.get("reason"):
            problems.append(f"system {name!r}: status {status} without a reason")
    for target in results["targets"]:
        problems += [f"target lacks {f!r}: {target}" for f in TARGET_FIELDS if f not in target]
        if target.get("status") not in TARGET_STATUSES:
            problems.append(f"target {target.get('name')!r}: status {target.get('status')!r}")
    return problems


def write_results(results: dict[str, Any], path: Path) -> Path:
    problems = validate(results)
    if problems:
        raise ValueError("results do not follow the schema: " + "; ".join(problems))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2, sort_keys=False) + "\n")
    return path


def read_results(path: Path) -> dict[str, Any]:
    results: dict[str, Any] = json.loads(path.read_text())
    return results


__all__ = ["SCHEMA", "SYSTEM_METRICS", "read_results", "validate", "write_results"]
