"""The decode HPA on shardstream_decoders_wanted, the scaling policy's own number, rendered by the real
Helm engine: its target is one worker's decode units, its bounds are the policy's, and it removes
workers only after the service has drained them."""

from __future__ import annotations

import math
import re
from typing import Any

import helm_python as helm
import pytest
import yaml

from shardstream.service.control import metrics as service_metrics
from tests.chart.chart import FULLNAME, ROOT, default_values, lint, render, validate
from tests.chart.scaling_metrics import WANTED

KEY = r"decode\.autoscaling\.metrics\.decodersWanted"


def _values(max_decoders: int | None = 16, cpus: int = 2, decoder_cpus: float = 1.0,
            config: dict[str, Any] | None = None, **autoscaling: Any) -> dict[str, Any]:
    """decodersWanted alone, the policy on up to max_decoders, the chart's other defaults."""
    metrics = {"decodersWanted": {"enabled": True}, "cpu": {"enabled": False},
               **autoscaling.pop("metrics", {})}
    return {"config": {"autoscale_max_decoders": max_decoders, "decoder_cpus": decoder_cpus, **(config or {})},
            "decode": {"cpus": cpus, "autoscaling": {"enabled": True, "metrics": metrics, **autoscaling}}}


def _hpa(values: dict[str, Any]) -> dict[str, Any]:
    (hpa,) = render(values).of_kind("HorizontalPodAutoscaler")
    validate(hpa)
    spec: dict[str, Any] = hpa["spec"]
    return spec


def test_it_is_off_by_default_and_named_as_the_service_exports_it() -> None:
    wanted = default_values()["decode"]["autoscaling"]["metrics"]["decodersWanted"]
    assert wanted == {"enabled": False, "metricName": WANTED}


def test_the_name_is_the_services_own_definition() -> None:
    assert service_metrics.DECODERS_WANTED == WANTED


@pytest.mark.parametrize(("cpus", "decoder_cpus", "units", "max_replicas"), [
    (2, 1.0, 2, 8),    # the chart's defaults: 8 workers x 2 units hold 16 decoders
    (8, 1.5, 5, 4),    # floor(8 / 1.5) = 5 units; 4 workers hold 16 (20 units)
    (4, 0.5, 8, 2),    # 8 units; 2 workers hold 16
    (3, 3.0, 1, 16),   # one unit a worker: a worker per decoder
])
def test_the_target_is_one_workers_decode_units(cpus: int, decoder_cpus: float, units: int,
                                                  max_replicas: int) -> None:
    values = _values(16, cpus, decoder_cpus, maxReplicas=max_replicas)
    report = lint(values)
    assert report["errors"] == [] and [m for m in report["messages"] if m["severity"] >= 2] == [], report
    out = render(values)
    spec = _hpa(values)
    assert spec["metrics"] == [{"type": "External", "external": {
        "metric": {"name": WANTED, "selector": {"matchLabels": {"service": FULLNAME}}},
        "target": {"type": "AverageValue", "averageValue": str(units)}}}]
    assert (spec["minReplicas"], spec["maxReplicas"]) == (1, max_replicas)
    # The units the target names are the ones each worker offers Ray.
    assert f'--resources=\'{{"decode": {units}}}\'' in out.decode["spec"]["template"]["spec"]["containers"][0][
        "args"][0]
    assert out.config_map["SHARDSTREAM_AUTOSCALE_MAX_DECODERS"] == "16"
    # What the HPA then asks for (an External AverageValue target: ceil(metric / target)) is the
    # fewest workers whose units hold every wanted decoder, and the policy's ceiling needs maxReplicas.
    target = int(spec["metrics"][0]["external"]["target"]["averageValue"])
    for wanted in range(1, 17):
        replicas = math.ceil(wanted / target)
        assert replicas * units >= wanted > (replicas - 1) * units
    assert math.ceil(16 / target) == max_replicas


def test_the_selector_is_this_releases_series_unless_given() -> None:
    metric = _hpa(_values(metrics={"decodersWanted": {"enabled": True, "selector": {}}}))["metrics"][0]
    assert metric["external"]["metric"] == {"name": WANTED}
    metric = _hpa(_values(metrics={"decodersWanted": {"enabled": True, "selector": {"service": "other"}}}))[
        "metrics"][0]
    assert metric["external"]["metric"]["selector"] == {"matchLabels": {"service": "other"}}
    # The default names the Service the ServiceMonitor scrapes, whose name the scrape's `service` label is.
    out = render({**_values(), "metrics": {"serviceMonitor": {"enabled": True}}})
    (monitor,) = out.of_kind("ServiceMonitor")
    scraped = [s for s in out.of_kind("Service")
               if s["metadata"]["labels"].items() >= monitor["spec"]["selector"]["matchLabels"].items()
               and any(p["name"] == "metrics" for p in s["spec"]["ports"])]
    assert [s["metadata"]["name"] for s in scraped] == [FULLNAME]


@pytest.mark.parametrize(("window_s", "behavior", "expected"), [
    (10.0, {}, 300),  # 2 x window is below Kubernetes' own default, which the chart keeps
    (400.0, {}, 800),  # 2 x window
    (7.3, {}, 300),
    (200.25, {}, 401),  # rounded up
    (10.0, {"scaleDown": {"stabilizationWindowSeconds": 20}}, 20),  # exactly 2 x window is enough
    (10.0, {"scaleDown": {"stabilizationWindowSeconds": 900, "selectPolicy": "Min"}}, 900),
])
def test_the_scale_down_waits_at_least_two_policy_windows(window_s: float, behavior: dict[str, Any],
                                                          expected: int) -> None:
    spec = _hpa(_values(config={"autoscale_window_s": window_s}, behavior=behavior))
    assert spec["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == expected
    assert spec["behavior"]["scaleDown"].items() >= behavior.get("scaleDown", {}).items()


def test_a_scale_down_window_shorter_than_two_policy_windows_is_refused() -> None:
    values = _values(config={"autoscale_window_s": 30.0}, behavior={"scaleDown": {"stabilizationWindowSeconds": 59}})
    with pytest.raises(helm.HelmError, match=re.escape(
            "decode.autoscaling.behavior.scaleDown.stabilizationWindowSeconds (59) must be at least 60, "
            "twice config.autoscale_window_s (30)")):
        render(values)
    with pytest.raises(helm.HelmError, match=r"autoscale_window_s \(2000\) is too long"):
        render(_values(config={"autoscale_window_s": 2000.0}))
    # Without decodersWanted the chart leaves the behavior as given.
    spec = _hpa({"decode": {"autoscaling": {"enabled": True, "behavior": {"scaleDown": {"stabilizationWindowSeconds": 5}}}}})
    assert spec["behavior"] == {"scaleDown": {"stabilizationWindowSeconds": 5}}


@pytest.mark.parametrize(("values", "message"), [
    (_values(None), KEY + r" needs config\.autoscale_max_decoders .*: set it to 16, "
     r"decode\.autoscaling\.maxReplicas \(8\) x 2 decode units per worker"),
    (_values(16, maxReplicas=3), KEY + r": decode\.autoscaling\.maxReplicas \(3\) must be the decode workers "
     r"that hold config\.autoscale_max_decoders \(16\), ceil\(16 / 2 decode units per worker\) = 8; "
     r"or set config\.autoscale_max_decoders to 6"),
    (_values(10, cpus=8, decoder_cpus=1.5), r"maxReplicas \(8\) must be .* ceil\(10 / 5 decode units per worker\) = 2"),
    (_values(16, minReplicas=2), KEY + r": decode\.autoscaling\.minReplicas \(2\) must be the decode workers "
     r"that hold config\.autoscale_min_decoders \(1\), ceil\(1 / 2 decode units per worker\) = 1"),
    (_values(16, config={"num_decoders": 4}), KEY + r" needs config\.num_decoders unset \(it is 4\)"),
    (_values(16, metrics={"cpu": {"enabled": True}}), KEY + r" is the decode workers' count itself: turn "
     r"decode\.autoscaling\.metrics\.\{cpu,dataStall,queueDepth\} off with it"),
    (_values(16, metrics={"queueDepth": {"enabled": True}}), KEY + " is the decode workers' count itself"),
    ({**_values(16), "metrics": {"enabled": False}}, KEY + r" needs metrics\.enabled"),
])
def test_inconsistent_values_are_refused(values: dict[str, Any], message: str) -> None:
    with pytest.raises(helm.HelmError, match=message):
        render(values)


def test_consistent_bounds_render() -> None:
    values = _values(30, cpus=8, decoder_cpus=1.0, minReplicas=2, maxReplicas=4,
                     config={"autoscale_min_decoders": 9}, behavior={"scaleUp": {"tolerance": "0"}})
    spec = _hpa(values)
    assert (spec["minReplicas"], spec["maxReplicas"]) == (2, 4)
    assert spec["metrics"][0]["external"]["target"]["averageValue"] == "8"
    # The user's behavior is kept beside the chart's scale-down window (tolerance: Kubernetes 1.33+).
    assert spec["behavior"] == {"scaleUp": {"tolerance": "0"}, "scaleDown": {"stabilizationWindowSeconds": 300}}
    assert "2 to 4 decode workers (autoscaled on the decoders the scaling policy wants)" in render(values).notes


def test_the_adapter_rule_serves_the_name_the_service_exports() -> None:
    adapter = yaml.safe_load((ROOT / "deploy" / "prometheus-adapter-values.yaml").read_text())
    (rule,) = [r for r in adapter["rules"]["external"] if r["name"]["as"] == WANTED]
    assert re.findall(r'__name__="([^"]+)"', rule["seriesQuery"]) == [WANTED]
    assert re.fullmatch(rule["name"]["matches"], WANTED)
    assert rule["resources"]["overrides"] == {"namespace": {"resource": "namespace"}}
    # One number: the head's series, never summed with a duplicate of itself.
    assert rule["metricsQuery"] == "max(<<.Series>>{<<.LabelMatchers>>})"
    # The HPA asks the adapter for the name the rule serves it as.
    assert _hpa(_values())["metrics"][0]["external"]["metric"]["name"] == rule["name"]["as"]
