"""The decode HPA on CPU and on external metrics (data stall, queue depth), rendered by the real Helm engine;
on the scaling policy's wanted decoders: test_decoders_wanted.py."""

from __future__ import annotations

from typing import Any

import helm_python as helm
import pytest
import yaml

from tests.chart.chart import ROOT, default_values, lint, render, validate

CPU_70 = {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization",
                                                                   "averageUtilization": 70}}}


def _autoscaling(**values: Any) -> dict[str, Any]:
    return {"decode": {"autoscaling": {"enabled": True, **values}}}


def _hpa(values: dict[str, Any]) -> dict[str, Any]:
    (hpa,) = render(values).of_kind("HorizontalPodAutoscaler")
    validate(hpa)
    return hpa


def test_defaults_are_cpu_only() -> None:
    metrics = default_values()["decode"]["autoscaling"]["metrics"]
    assert metrics["cpu"]["enabled"] is True
    assert metrics["dataStall"]["enabled"] is False and metrics["queueDepth"]["enabled"] is False
    assert metrics["decodersWanted"]["enabled"] is False
    assert render().of_kind("HorizontalPodAutoscaler") == []
    spec = _hpa(_autoscaling())["spec"]
    # Exactly what the chart rendered before external metrics existed.
    assert spec == {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "demo-shardstream-decode"},
                    "minReplicas": 1, "maxReplicas": 8, "metrics": [CPU_70]}


def test_external_metrics_as_configured() -> None:
    values = _autoscaling(minReplicas=2, maxReplicas=20, targetCPUUtilizationPercentage=60, metrics={
        "dataStall": {"enabled": True, "target": 0.15, "selector": {"job": "run-7"}},
        "queueDepth": {"enabled": True, "metricName": "shardstream_decode_queue_depth", "targetAverageValue": 6},
    }, behavior={"scaleDown": {"stabilizationWindowSeconds": 600}})
    report = lint(values)
    assert report["errors"] == [] and [m for m in report["messages"] if m["severity"] >= 2] == [], report
    spec = _hpa(values)["spec"]
    assert (spec["minReplicas"], spec["maxReplicas"]) == (2, 20)
    assert spec["metrics"] == [
        {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 60}}},
        {"type": "External", "external": {
            "metric": {"name": "shardstream_job_data_stall_ratio", "selector": {"matchLabels": {"job": "run-7"}}},
            "target": {"type": "Value", "value": "0.15"}}},
        {"type": "External", "external": {
            "metric": {"name": "shardstream_decode_queue_depth"},
            "target": {"type": "AverageValue", "averageValue": "6"}}},
    ]
    assert spec["behavior"] == {"scaleDown": {"stabilizationWindowSeconds": 600}}


def test_external_metrics_alone_and_quantity_targets() -> None:
    spec = _hpa(_autoscaling(metrics={"cpu": {"enabled": False},
                                      "dataStall": {"enabled": True, "target": "100m"}}))["spec"]
    assert spec["metrics"] == [{"type": "External", "external": {
        "metric": {"name": "shardstream_job_data_stall_ratio"}, "target": {"type": "Value", "value": "100m"}}}]


def test_an_hpa_with_nothing_to_scale_on_is_refused() -> None:
    with pytest.raises(helm.HelmError, match=r"at least one of decode\.autoscaling\.metrics"):
        render(_autoscaling(metrics={"cpu": {"enabled": False}}))
    # Disabled, the same values are fine: there is no HPA.
    assert render({"decode": {"autoscaling": {"metrics": {"cpu": {"enabled": False}}}}}).of_kind(
        "HorizontalPodAutoscaler") == []


@pytest.mark.parametrize("metrics", [
    {"dataStall": {"target": 0}},
    {"dataStall": {"target": "lots"}},
    {"queueDepth": {"targetAverageValue": -4}},
    {"queueDepth": {"selector": {"node-name": "a"}}},
    {"queueDepth": {"selector": {"node": 3}}},
    {"dataStall": {"metricName": "not a metric"}},
    {"dataStall": {"threshold": 0.1}},
    {"memory": {"enabled": True}},
    {"decodersWanted": {"targetAverageValue": 2}},  # the target is a worker's decode units, not a value
    {"decodersWanted": {"metricName": "not a metric"}},
    {"decodersWanted": {"selector": {"service": 1}}},
])
def test_the_schema_refuses_bad_metric_values(metrics: dict[str, Any]) -> None:
    with pytest.raises(helm.HelmValuesError):
        render(_autoscaling(metrics=metrics))


def test_the_example_values_and_the_adapter_rules_agree() -> None:
    values = yaml.safe_load((ROOT / "deploy" / "autoscaling-values.yaml").read_text())
    report = lint(values)
    assert report["errors"] == [] and [m for m in report["messages"] if m["severity"] >= 2] == [], report
    out = render(values)
    (hpa,) = out.of_kind("HorizontalPodAutoscaler")
    validate(hpa)
    # The example is the recommended one: the policy's wanted decoders alone, 2 decode units a worker.
    assert hpa["spec"]["metrics"] == [{"type": "External", "external": {
        "metric": {"name": "shardstream_decoders_wanted", "selector": {"matchLabels": {"service": "demo-shardstream"}}},
        "target": {"type": "AverageValue", "averageValue": "2"}}}]
    assert hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] >= 2 * values["config"]["autoscale_window_s"]
    assert out.config_map["SHARDSTREAM_AUTOSCALE_MAX_DECODERS"] == "32"
    # The adapter serves every external metric the chart can ask for, each under its own name.
    metrics = default_values()["decode"]["autoscaling"]["metrics"]
    external = {m["metricName"] for m in metrics.values() if "metricName" in m}
    assert external == {"shardstream_decoders_wanted", "shardstream_job_data_stall_ratio",
                        "shardstream_decode_queue_depth"}
    adapter = yaml.safe_load((ROOT / "deploy" / "prometheus-adapter-values.yaml").read_text())
    rules = {rule["name"]["as"]: rule for rule in adapter["rules"]["external"]}
    assert rules.keys() == external
    for name, rule in rules.items():
        assert f'__name__="{name}"' in rule["seriesQuery"]
        assert rule["resources"]["overrides"] == {"namespace": {"resource": "namespace"}}
        assert "<<.Series>>{<<.LabelMatchers>>}" in rule["metricsQuery"]
    # The adapter finds the series by the namespace label the ServiceMonitor's scrape adds, and the
    # metrics keep their own `job` label.
    (monitor,) = out.of_kind("ServiceMonitor")
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["honorLabels"] is True
