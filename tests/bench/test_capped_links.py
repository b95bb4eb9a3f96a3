"""bench.capped_links' arithmetic: CPU by role between snapshots, the cores' ceiling, and a verdict
that names the machine when its cores, not the links, were the limit."""

from __future__ import annotations

from typing import Any

from bench.capped_links import cpu_ceiling_mb_s, report
from bench.host_cpu import CpuSnapshot, cpu_by_role, namespace_pids


def _snapshot(at: float, busy: float, softirq: float, processes: dict[int, tuple[str, float]]) -> CpuSnapshot:
    return CpuSnapshot(at=at, processes=processes, busy_s=busy, softirq_s=softirq)


def test_cpu_by_role_counts_new_processes_from_zero_and_the_rest_as_other() -> None:
    before = _snapshot(0.0, 100.0, 10.0, {1: ("decoders", 5.0), 2: ("raylets", 1.0)})
    after = _snapshot(4.0, 106.0, 10.5, {1: ("decoders", 6.5), 2: ("raylets", 1.25), 3: ("rank", 2.0)})
    cpu = cpu_by_role(before, after)
    assert (cpu["decoders"], cpu["raylets"], cpu["rank"], cpu["softirq"]) == (1.5, 0.25, 2.0, 0.5)
    assert cpu["other"] == 6.0 - 1.5 - 0.25 - 2.0 - 0.5
    assert cpu["wall_s"] == 4.0


def _cpu(saturation: float) -> dict[str, float]:
    return {"decoders": 1.0, "raylets": 0.25, "service": 0.0, "rank": 0.5, "softirq": 0.25, "other": 3.0,
            "busy": 5.0, "wall_s": 1.0, "cores": 2.0, "steady_gb": 0.5, "saturation": saturation}


def _results(ratio: float, saturation: float) -> dict[str, Any]:
    run = {"decode_hosts": 3, "caps_mb_s": 100.0, "mb_s": 100.0 * ratio, "samples_per_s": 1500.0,
           "delivered_bytes": 10**9, "head_sent_bytes": 10**4, "epochs_checked": 3, "mismatches": 0,
           "cpu": _cpu(saturation), "load_1m_before": 0.5}
    return {"runs": [run], "added": {}, "prefetch": 16, "batch_size": 16, "row_bytes": 65536}


def test_the_ceiling_is_the_cores_over_the_hosts_cpu_per_gb() -> None:
    assert cpu_ceiling_mb_s(_cpu(0.5)) == 2.0 / 4.0 * 1e3  # (1 + 0.25 + 0.5 + 0.25) / 0.5 GB = 4 CPU-s/GB


def test_a_shortfall_on_saturated_cores_is_named_the_machines() -> None:
    saturated = [line for line in report(_results(0.85, 0.97)) if "host(s)" in line]
    assert saturated == ["FAIL: 3 host(s) 0.85x the caps (target 0.9x) (the cores were 97% busy: this machine's "
                         "ceiling, not the links')"]
    idle = [line for line in report(_results(0.85, 0.30)) if "host(s)" in line]
    assert idle == ["FAIL: 3 host(s) 0.85x the caps (target 0.9x)"]
    assert next(line for line in report(_results(0.95, 0.97)) if "host(s)" in line).startswith("PASS")


def test_this_process_is_in_no_named_namespace() -> None:
    assert namespace_pids(["no-such-namespace"]) == []
    snapshot = CpuSnapshot.take([])
    assert snapshot.processes == {}
    assert 0 < snapshot.softirq_s <= snapshot.busy_s
