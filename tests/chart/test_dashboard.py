"""deploy/grafana's dashboard: well-formed for Grafana, and every PromQL expression names only
metrics a real running service exports (its /metrics scraped after a small job)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.request
from itertools import combinations
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from shardstream.client import RemoteLoader
from shardstream.service.control.server import Service
from tests.chart.chart import ROOT, default_values
from tests.chart.scaling_metrics import (
    BUSY_RATIO,
    DECISIONS,
    DECODERS,
    DRAINING,
    POLICY_ONLY,
    SCALING_METRICS,
    WANTED,
)
from tests.datasets import write_indexed

DASHBOARD = ROOT / "deploy" / "grafana" / "shardstream-dashboard.json"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
# PromQL keywords that look like names: binary operators and modifiers.
KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left",
            "group_right", "inf", "nan", "atan2"}
# Each family type's series names, from its family name (the parser strips a counter's _total).
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "summary": ("", "_sum", "_count"),
            "gauge": ("",), "unknown": ("",)}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers that are not functions,
    aggregations, keywords, label names (in matchers, by/without/on/ignoring lists) or durations."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals ("$job", regexes)
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # range selectors: [5m], [$__rate_interval]
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for match in re.finditer(r"(?<![\w.$])[A-Za-z_:][A-Za-z0-9_:]*", text):
        if text[match.end():].lstrip().startswith("(") or match.group().lower() in KEYWORDS:
            continue  # a function or aggregation, or a keyword
        names.add(match.group())
    return names


def _dashboard() -> dict[str, Any]:
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return dashboard


def _targets() -> list[tuple[str, dict[str, Any]]]:
    """(title, target) of every query: the panels' targets and the Prometheus annotations'."""
    dashboard = _dashboard()
    return ([(panel["title"], target) for panel in dashboard["panels"] for target in panel.get("targets", [])] +
            [(a["name"], a) for a in dashboard["annotations"]["list"] if "expr" in a])


def _panel(title: str) -> dict[str, Any]:
    (panel,) = [p for p in _dashboard()["panels"] if p["title"] == title]
    return panel


def _variable(name: str) -> dict[str, Any]:
    (variable,) = [v for v in _dashboard()["templating"]["list"] if v["name"] == name]
    return variable


def _label_values_metric() -> str:
    query = _variable("job")["query"]
    text = query["query"] if isinstance(query, dict) else query
    match = re.fullmatch(r"label_values\(\s*([A-Za-z_:][A-Za-z0-9_:]*)\s*,\s*job\s*\)", text)
    assert match, text
    return match.group(1)


def test_the_extractor_finds_metric_names_only() -> None:
    assert metric_names('sum by (job) (rate(a_total{job=~"$job"}[$__rate_interval]))') == {"a_total"}
    assert metric_names("histogram_quantile(0.95, sum by (le) (rate(h_bucket[5m])))") == {"h_bucket"}
    assert metric_names("sum(rate(x[1m])) / on() group_left() (sum(y) + sum(z offset 5m))") == {"x", "y", "z"}
    assert metric_names('60 * max without (rank) (g{code!="OK"}) > bool 1e3') == {"g"}
    assert metric_names("count(q) and on(node) r") == {"q", "r"}


def test_the_dashboard_is_well_formed_for_grafana() -> None:
    dashboard = _dashboard()
    assert dashboard["uid"] and dashboard["title"]
    assert isinstance(dashboard["schemaVersion"], int) and 36 <= dashboard["schemaVersion"] <= 41
    datasource = _variable("datasource")
    assert (datasource["type"], datasource["query"]) == ("datasource", "prometheus")
    job = _variable("job")
    assert job["type"] == "query" and job["datasource"] == DATASOURCE
    assert job["definition"] == "label_values(shardstream_active_streams, job)"
    assert _label_values_metric() == "shardstream_active_streams"
    assert job["includeAll"] and job["multi"] and job["allValue"] == ".*"
    panels = dashboard["panels"]
    assert len(panels) >= 10
    rows = [p for p in panels if p["type"] == "row"]
    for row in rows:  # a full-width header line, its panels below it (not collapsed into it)
        assert row["title"] and row["gridPos"]["w"] == 24 and row["gridPos"]["h"] == 1, row
        assert row["collapsed"] is False and row["panels"] == [] and "targets" not in row, row
    panels = [p for p in panels if p["type"] != "row"]
    ids = [p["id"] for p in panels]
    assert all(isinstance(i, int) for i in ids) and len(set(ids)) == len(ids)
    for panel in panels:
        assert panel["type"] == "timeseries" and panel["title"], panel
        assert panel["datasource"] == DATASOURCE, panel["title"]
        grid = panel["gridPos"]
        assert set(grid) == {"x", "y", "w", "h"} and all(isinstance(v, int) for v in grid.values())
        assert grid["x"] >= 0 and grid["y"] >= 0 and grid["w"] > 0 and grid["h"] > 0
        assert grid["x"] + grid["w"] <= 24, panel["title"]  # Grafana's grid is 24 columns wide
        assert panel["fieldConfig"]["defaults"]["unit"], panel["title"]
        targets = panel["targets"]
        assert targets, panel["title"]
        refs = [t["refId"] for t in targets]
        assert len(set(refs)) == len(refs), panel["title"]
        for target in targets:
            assert target["expr"].strip() and target["datasource"] == DATASOURCE, panel["title"]
    for a, b in combinations(panels + rows, 2):
        ga, gb = a["gridPos"], b["gridPos"]
        apart = (ga["x"] + ga["w"] <= gb["x"] or gb["x"] + gb["w"] <= ga["x"] or
                 ga["y"] + ga["h"] <= gb["y"] or gb["y"] + gb["h"] <= ga["y"])
        assert apart, (a["title"], b["title"])
    titles = " ".join(p["title"].lower() for p in panels)
    for topic in ("samples/s", "bytes/s", "stall per job", "stall per rank", "latency", "queue depth",
                  "decoders", "cache", "lag", "errors", "wanted", "scaling decisions", "busy"):
        assert topic in titles, topic
    for annotation in dashboard["annotations"]["list"]:
        if "expr" in annotation:
            assert annotation["datasource"] == DATASOURCE and annotation["name"], annotation
            assert annotation["titleFormat"] and annotation["step"], annotation


def test_the_decode_scaling_row() -> None:
    """Wanted vs ready vs draining decoders, the decisions, and busy time beside the jobs' stall: the
    policy's numbers, under a row of their own below the other panels."""
    panels = _dashboard()["panels"]
    (row,) = [p for p in panels if p["type"] == "row" and p["title"] == "Decode scaling"]
    below = [p for p in panels if p["gridPos"]["y"] > row["gridPos"]["y"]]
    assert all(p["gridPos"]["y"] + p["gridPos"]["h"] <= row["gridPos"]["y"] for p in panels if p not in [*below, row])
    assert {p["title"] for p in below} == {"Decoders: wanted, ready, draining", "Scaling decisions",
                                          "Decoders busy vs data stall"}
    decoders = _panel("Decoders: wanted, ready, draining")
    assert {t["legendFormat"]: metric_names(t["expr"]) for t in decoders["targets"]} == {
        "wanted": {WANTED}, "ready": {DECODERS}, "draining": {DRAINING}}
    (wanted,) = [t["expr"] for t in decoders["targets"] if t["legendFormat"] == "wanted"]
    assert wanted == f"max({WANTED})"  # the one number the HPA scales on, as the adapter serves it
    (decisions,) = _panel("Scaling decisions")["targets"]
    assert metric_names(decisions["expr"]) == {DECISIONS} and "by (direction)" in decisions["expr"]
    assert decisions["legendFormat"] == "{{direction}}"
    busy = _panel("Decoders busy vs data stall")
    assert [metric_names(t["expr"]) for t in busy["targets"]] == [{BUSY_RATIO}, {"shardstream_job_data_stall_ratio"}]
    defaults = busy["fieldConfig"]["defaults"]
    assert (defaults["unit"], defaults["min"], defaults["max"]) == ("percentunit", 0, 1)  # both are 0..1
    annotations = {a["name"]: a["expr"] for a in _dashboard()["annotations"]["list"] if "expr" in a}
    assert annotations.keys() == {"Scaling up", "Scaling down"}
    for name, expr in annotations.items():
        assert metric_names(expr) == {DECISIONS}
        assert f'direction="{name.split()[1]}"' in expr


def test_per_job_panels_follow_the_job_variable() -> None:
    for title, target in _targets():
        expr = target["expr"]
        if re.search(r"shardstream_(samples|bytes)_served_total|data_stall_ratio|rank_lag", expr):
            assert 'job=~"$job"' in expr, (title, expr)


def _adapter_queries() -> dict[str, str]:
    """The Prometheus adapter's external rules (deploy/): metric name -> the query it would run for
    an HPA in namespace `ns` whose selector is {job: run-7}."""
    adapter = yaml.safe_load((ROOT / "deploy" / "prometheus-adapter-values.yaml").read_text())
    queries = {}
    for rule in adapter["rules"]["external"]:
        (name,) = re.findall(r'__name__="([^"]+)"', rule["seriesQuery"])
        assert rule["name"]["as"] == name
        queries[name] = (rule["metricsQuery"].replace("<<.Series>>", name)
                         .replace("<<.LabelMatchers>>", 'namespace="ns",job="run-7"'))
    return queries


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Prometheus) is not installed")
def test_every_expression_parses_as_promql(tmp_path: Path) -> None:
    exprs = [target["expr"].replace("$__rate_interval", "1m").replace("$job", ".*") for _, target in _targets()]
    exprs += _adapter_queries().values()
    rules = [{"record": f"dashboard:expr_{i}", "expr": expr} for i, expr in enumerate(exprs)]
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    checked = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.fixture(scope="module")
def exported(service: tuple[Service, str], tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """Series names the running service exports, for every metric family on its /metrics, after a
    small two-rank job (so per-job and per-rank families have series too)."""
    running, address = service
    assert running.metrics_port
    data = str(tmp_path_factory.mktemp("dashboard") / "data")
    write_indexed(data, [12, 9])
    for rank in (0, 1):
        with RemoteLoader(address, dataset=data, batch_size=4, world_size=2, rank=rank,
                          job_name="dashboard-job") as loader:
            assert len(list(loader)) > 0
    with urllib.request.urlopen(f"http://127.0.0.1:{running.metrics_port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names.update(family.name + suffix for suffix in SUFFIXES[family.type])
        names.update(sample.name for sample in family.samples)
    return names


def test_every_expression_names_exported_metrics(exported: set[str]) -> None:
    assert {"shardstream_samples_served_total", "shardstream_decode_seconds_bucket",
            "shardstream_decode_queue_depth"} <= exported  # the scrape is what it should be
    used: set[str] = set()
    for title, target in _targets():
        names = metric_names(target["expr"])
        assert names, (title, target["expr"])
        # The busy ratio need not be in this scrape: this service runs a fixed pool (num_decoders),
        # without the policy (config.autoscale_max_decoders).
        assert names - POLICY_ONLY <= exported, (title, sorted(names - POLICY_ONLY - exported))
        used |= names
    assert _label_values_metric() in exported
    assert {"shardstream_rank_data_stall_ratio", "shardstream_job_data_stall_ratio"} <= used
    assert SCALING_METRICS <= used


def test_autoscaling_names_exported_metrics(exported: set[str]) -> None:
    external = default_values()["decode"]["autoscaling"]["metrics"]
    assert {external["dataStall"]["metricName"], external["queueDepth"]["metricName"]} <= exported
    assert external["decodersWanted"]["metricName"] == WANTED and WANTED in exported  # with or without the policy
    queries = _adapter_queries()
    assert queries.keys() == {external[m]["metricName"] for m in ("decodersWanted", "dataStall", "queueDepth")}
    for name, query in queries.items():
        names = metric_names(query)
        assert name in names and names - POLICY_ONLY <= exported, (query, sorted(names - exported))
