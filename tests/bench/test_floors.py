"""The gRPC floor: raw gRPC consumer CPU per MB scaled to one JPEG sample, against DataLoader."""

from __future__ import annotations

from typing import Any

import pytest

from bench.floors import floor_text, grpc_floor


def _results(raw_cpu_per_1k: dict[str, float], batch_bytes: float = 64 * 150_000,
             dataloader_cpu: float = 0.8) -> dict[str, Any]:
    return {
        "config": {"batch_size": 64},
        "systems": {"shardstream": {"status": "ok", "median": {"batch_bytes": batch_bytes}},
                    "dataloader": {"status": "ok", "median": {"cpu_total_per_1k": dataloader_cpu}}},
        "transport": {"status": "ok", "dataset": {"row_bytes": 100_000},
                      "results": {"grpc_raw": {mib: {"median": {"cpu_self_per_1k": cpu}}
                                               for mib, cpu in raw_cpu_per_1k.items()}}},
    }


def test_floor_scales_raw_grpc_cpu_per_mb_to_one_sample() -> None:
    # 1000 rows of 0.1 MB = 100 MB; medians over sizes 0.06 and 0.1 CPU-s -> 0.08 s / 100 MB.
    floor = grpc_floor(_results({"4": 0.06, "16": 0.10}))
    assert floor is not None
    assert floor.receive_cpu_s_per_mb == pytest.approx(0.0008)
    assert floor.sample_mb == pytest.approx(0.15)
    assert floor.consumer_cpu_per_1k == pytest.approx(0.12)
    assert floor.cpu_ratio == pytest.approx(0.15)
    assert floor.throughput_ceiling == pytest.approx(0.8 / 0.92)
    assert "0.15x DataLoader" in floor_text(_results({"4": 0.06, "16": 0.10}))


def test_no_floor_without_the_raw_grpc_run_or_a_dataloader_run() -> None:
    missing_transport = _results({"4": 0.06})
    missing_transport["transport"] = {"status": "skipped"}
    assert grpc_floor(missing_transport) is None and floor_text(missing_transport) == ""
    failed_dataloader = _results({"4": 0.06})
    failed_dataloader["systems"]["dataloader"]["status"] = "failed"
    assert grpc_floor(failed_dataloader) is None
