"""bench.targets: the PASS/FAIL/SKIP verdict of the project's targets, from a results document."""

from __future__ import annotations

from typing import Any

import pytest

from bench.targets import FAIL, PASS, SKIP, all_passed, evaluate, verdict


def _system(samples_per_s: float, cpu_total_per_1k: float = 1.0, **extra: float) -> dict[str, Any]:
    median = {"samples_per_s": samples_per_s, "cpu_total_per_1k": cpu_total_per_1k, **extra}
    return {"status": "ok", "runs": [median], "median": median}


def _transport(ours: float, grpc: float) -> dict[str, Any]:
    def entry(mb_per_s: float) -> dict[str, Any]:
        return {"64": {"runs": [], "median": {"mb_per_s": mb_per_s, "cpu_self_per_1k": 0.1,
                                              "server_cpu_per_1k": 0.05}}}

    return {"status": "ok", "batch_rows": [64], "dataset": {"row_bytes": 150_000},
            "results": {"shardstream": entry(ours), "grpc_raw": entry(grpc), "tcp_raw": entry(5000.0)}}


def _results(**overrides: Any) -> dict[str, Any]:
    results: dict[str, Any] = {
        "config": {"prefetch": 4, "batch_size": 64},
        "systems": {
            "shardstream": {**_system(1700.0, 0.05, ttfb_s=0.5, rss_growth_mb=40.0, batch_bytes=10e6,
                                      server_main_cpu_per_1k=0.001, server_decoders_cpu_per_1k=0.24,
                                      server_cpu_per_1k=0.25),
                            "network_path": {"runs": [], "median": {"samples_per_s": 1400.0, "rss_growth_mb": 42.0,
                                                                    "batch_bytes": 10e6}},
                            "prepared_cache": {"runs": [], "median": {"samples_per_s": 1600.0}},
                            "second_job_first": {"runs": [], "median": {"samples_per_s": 760.0}},
                            "second_job_warm": {"runs": [], "median": {"samples_per_s": 800.0}}},
            "dataloader": _system(1000.0, 1.0),
            "raydata": _system(400.0),
            "tfdata": {**_system(700.0), "cache_decoded": {"runs": [], "median": {"samples_per_s": 1500.0}}},
            "spdl": _system(900.0),
        },
        "transport": _transport(1200.0, 1400.0),
        "decode_limit": {"runs": [], "cpu_per_1k": {"pillow": 0.3, "simplejpeg": 0.2}},
    }
    results.update(overrides)
    return results


def _by_name(targets: list[Any]) -> dict[str, Any]:
    return {t.name: t for t in targets}


@pytest.mark.parametrize(("value", "op", "threshold", "expected"), [
    (1.0, ">=", 0.95, PASS), (0.94, ">=", 0.95, FAIL), (0.95, ">=", 0.95, PASS),
    (0.05, "<=", 0.10, PASS), (0.11, "<=", 0.10, FAIL), (None, ">=", 1.0, SKIP),
    (float("nan"), "<=", 1.0, SKIP),
])
def test_verdict(value: float | None, op: str, threshold: float, expected: str) -> None:
    assert verdict(value, op, threshold) == expected


def test_verdict_refuses_an_unknown_comparison() -> None:
    with pytest.raises(ValueError):
        verdict(1.0, "==", 1.0)


def test_every_target_passes_on_good_figures() -> None:
    targets = evaluate(_results())
    assert [t.status for t in targets] == [PASS] * len(targets), targets
    assert all_passed(targets)
    names = {t.name for t in targets}
    assert "samples/s vs torch DataLoader" in names
    assert "transport 9.6 MB batches vs raw gRPC" in names
    assert "transport 9.6 MB batches throughput" in names


def test_ratios_are_shardstream_over_the_other_system() -> None:
    results = _results()
    results["systems"]["dataloader"] = _system(2000.0, 1.0)
    t = _by_name(evaluate(results))["samples/s vs torch DataLoader"]
    assert t.status == FAIL
    assert t.value == pytest.approx(0.85)
    assert t.threshold == 1.6


def test_the_network_path_and_spdl_are_compared_too() -> None:
    results = _results()
    targets = _by_name(evaluate(results))
    assert targets["network path samples/s vs torch DataLoader"].value == pytest.approx(1.4)
    assert targets["samples/s vs SPDL"].value == pytest.approx(1700 / 900)
    results["systems"]["shardstream"]["network_path"]["median"]["samples_per_s"] = 1200.0
    results["systems"]["spdl"] = _system(1800.0)
    targets = _by_name(evaluate(results))
    assert targets["network path samples/s vs torch DataLoader"].status == FAIL
    assert targets["samples/s vs SPDL"].status == FAIL
    results["systems"]["spdl"] = {"status": "skipped", "reason": "no FFmpeg"}
    assert _by_name(evaluate(results))["samples/s vs SPDL"].status == SKIP


def test_cpu_target_compares_against_dataloader_main_plus_workers() -> None:
    results = _results()
    results["systems"]["shardstream"]["median"]["cpu_total_per_1k"] = 0.2
    t = _by_name(evaluate(results))["consumer CPU/sample vs DataLoader (main+workers)"]
    assert t.value == pytest.approx(0.2)
    assert t.status == FAIL


def test_transport_targets_need_80_percent_of_grpc_and_1_gbps() -> None:
    targets = _by_name(evaluate(_results(transport=_transport(900.0, 1000.0))))
    assert targets["transport 9.6 MB batches vs raw gRPC"].status == PASS
    assert targets["transport 9.6 MB batches throughput"].status == FAIL
    assert targets["transport 9.6 MB batches throughput"].value == pytest.approx(0.9)
    # CPU per GB of both sides beside raw gRPC's: 0.1 and 0.05 CPU-s per 1000 rows of 150 KB
    assert "consumer 0.67 (raw gRPC floor 0.67), sender 0.33 (raw gRPC 0.33)" in (
        targets["transport 9.6 MB batches vs raw gRPC"].detail)


def test_control_target_is_the_serve_process_cpu_per_gb_delivered() -> None:
    results = _results()  # 64 samples of 10 MB batches: 1000 samples are 156.25 MB
    results["systems"]["shardstream"]["median"]["server_main_cpu_per_1k"] = 0.004
    t = _by_name(evaluate(results))["control process CPU per GB delivered"]
    assert t.value == pytest.approx(0.004 / 0.15625)
    assert t.status == FAIL
    del results["systems"]["shardstream"]["median"]["server_main_cpu_per_1k"]
    assert _by_name(evaluate(results))["control process CPU per GB delivered"].status == SKIP
    # With transport runs, from those: 250,000 samples in 2 GB, 0.01 CPU-s per 1000 samples.
    results["transport"]["results"]["shardstream"]["64"]["median"].update(
        server_main_cpu_per_1k=0.01, samples=250_000, nbytes=2e9)
    t = _by_name(evaluate(results))["control process CPU per GB delivered"]
    assert t.value == pytest.approx(0.01 * 250 / 2) and t.status == FAIL


def test_rss_target_is_the_prefetch_window_plus_ten_percent() -> None:
    results = _results()
    results["systems"]["shardstream"]["median"]["rss_growth_mb"] = 44.5  # window 4 x 10 MB = 40 MB
    t = _by_name(evaluate(results))["consumer peak RSS growth"]
    assert t.threshold == pytest.approx(44.0)
    assert t.status == FAIL


def test_the_network_paths_rss_target_is_its_own_prefetch_window_plus_ten_percent() -> None:
    """Batches received on bulk sockets land in the rank's own memory (the shared-memory path's
    are the decoders' pages): the network path is held to the same window."""
    results = _results()
    name = "consumer peak RSS growth, network path"
    t = _by_name(evaluate(results))[name]
    assert (t.status, t.value, t.threshold) == (PASS, 42.0, pytest.approx(44.0))
    results["systems"]["shardstream"]["network_path"]["median"]["rss_growth_mb"] = 71.0
    t = _by_name(evaluate(results))[name]
    assert t.status == FAIL and "4 x 10.00 MB = 40.0 MB" in t.detail
    assert _by_name(evaluate(results))["consumer peak RSS growth"].status == PASS  # its own figures
    results["systems"]["shardstream"]["network_path"]["median"]["batch_bytes"] = 20e6
    assert _by_name(evaluate(results))[name].threshold == pytest.approx(88.0)
    del results["systems"]["shardstream"]["network_path"]
    assert _by_name(evaluate(results))[name].status == SKIP


def test_a_skipped_system_skips_its_targets_only() -> None:
    results = _results()
    results["systems"]["tfdata"] = {"status": "skipped", "reason": "TensorFlow is not installed"}
    targets = _by_name(evaluate(results))
    assert targets["samples/s vs tf.data service"].status == SKIP
    assert targets["samples/s vs Ray Data"].status == PASS
    assert not all_passed(list(targets.values()))


def test_missing_transport_yields_no_transport_targets() -> None:
    targets = evaluate(_results(transport={"status": "skipped", "reason": "--no-transport"}))
    assert not [t for t in targets if t.name.startswith("transport")]


def test_warm_epochs_are_the_prepared_cache_variant_against_dataloader_and_skip_without_it() -> None:
    results = _results()
    warm = _by_name(evaluate(results))["warm epochs (prepared-sample cache) vs torch DataLoader"]
    assert (warm.status, warm.value, warm.threshold) == (PASS, pytest.approx(1.6), 1.5)
    results["systems"]["shardstream"]["prepared_cache"]["median"]["samples_per_s"] = 1400.0
    assert _by_name(evaluate(results))["warm epochs (prepared-sample cache) vs torch DataLoader"].status == FAIL
    del results["systems"]["shardstream"]["prepared_cache"]
    assert _by_name(evaluate(results))["warm epochs (prepared-sample cache) vs torch DataLoader"].status == SKIP


def test_a_second_jobs_first_epoch_is_judged_against_a_warm_epoch_beside_the_same_running_job() -> None:
    results = _results()
    name = "a second job's first epoch vs a warm epoch (another job running)"
    target = _by_name(evaluate(results))[name]
    assert (target.status, target.value, target.threshold) == (PASS, pytest.approx(0.95), 0.9)
    results["systems"]["shardstream"]["second_job_first"]["median"]["samples_per_s"] = 400.0  # decoding again
    assert _by_name(evaluate(results))[name].status == FAIL
    del results["systems"]["shardstream"]["second_job_warm"]
    assert _by_name(evaluate(results))[name].status == SKIP


def test_warm_epochs_are_judged_against_tf_data_with_its_cache_after_decode() -> None:
    results = _results()
    name = "warm epochs vs tf.data service with .cache() after decode"
    target = _by_name(evaluate(results))[name]
    assert (target.status, target.value, target.threshold) == (PASS, pytest.approx(1600 / 1500), 1.0)
    results["systems"]["tfdata"]["cache_decoded"]["median"]["samples_per_s"] = 1700.0
    assert _by_name(evaluate(results))[name].status == FAIL


DECODE = "decode actors' CPU/sample vs one core's decode + crop + flip"


def test_decode_actors_are_judged_against_the_fastest_single_core_decoder() -> None:
    results = _results()
    target = _by_name(evaluate(results))[DECODE]
    assert (target.status, target.value, target.threshold) == (PASS, pytest.approx(0.24 / 0.2), 1.25)
    assert "decode actors 0.240 (whole service 0.250) / simplejpeg 0.200" in target.detail
    results["systems"]["shardstream"]["median"]["server_decoders_cpu_per_1k"] = 0.26  # 1.3x the fastest
    assert _by_name(evaluate(results))[DECODE].status == FAIL
    del results["decode_limit"]["cpu_per_1k"]["simplejpeg"]  # only Pillow measured: 0.26 / 0.3
    target = _by_name(evaluate(results))[DECODE]
    assert (target.status, target.value) == (PASS, pytest.approx(0.26 / 0.3))
    # The part spent keeping prepared samples is shown, and still judged: it is the defaults' cost.
    results["systems"]["shardstream"]["median"]["cache_keep_cpu_per_1k"] = 0.015
    target = _by_name(evaluate(results))[DECODE]
    assert "decode actors 0.260, of which keeping prepared samples 0.015 (whole service" in target.detail
    assert target.value == pytest.approx(0.26 / 0.3)


def test_decode_target_skips_without_either_figure() -> None:
    results = _results()
    del results["decode_limit"]
    assert _by_name(evaluate(results))[DECODE].status == SKIP
    results = _results()
    del results["systems"]["shardstream"]["median"]["server_decoders_cpu_per_1k"]
    assert _by_name(evaluate(results))[DECODE].status == SKIP
