"""bench.results: the results document's schema, and the report built from it."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from bench.report import full_report, markdown_table, paired_text
from bench.results import SCHEMA, SYSTEM_METRICS, read_results, validate, write_results
from bench.targets import evaluate


def _metrics(samples_per_s: float) -> dict[str, float]:
    values = dict.fromkeys(SYSTEM_METRICS, 1.0)
    values.update(samples_per_s=samples_per_s, batch_bytes=9.6e6)
    return values


def _document() -> dict[str, Any]:
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "date": "2026-01-01T00:00:00+00:00",
        "command": "python -m bench --quick",
        "quick": True,
        "config": {"batch_size": 64, "crop": 224, "repetitions": 1, "prefetch": 4},
        "machine": {"cores": 2, "cpu_model": "test CPU", "memory_gib": 24.0, "gpu": False,
                    "revision": "abc123", "versions": {"python": "3.11"}},
        "workload": {"name": "jpeg-test", "samples": 128, "image_size": 256, "mean_jpeg_kb": 17.0},
        "systems": {
            "shardstream": {"status": "ok", "runs": [_metrics(900.0)], "median": _metrics(900.0),
                            "service": {"start_s": 5.0, "ttfb_cold_s": 2.0, "num_decoders": 2}},
            "dataloader": {"status": "ok", "runs": [_metrics(1000.0)], "median": _metrics(1000.0)},
            "tfdata": {"status": "skipped", "reason": "TensorFlow is not installed"},
        },
        "transport": {"status": "ok", "batch_rows": [64], "dataset": {"row_bytes": 150_528}, "results": {
            kind: {"64": {"runs": [], "median": {"mb_per_s": mbps, "cpu_self_per_1k": cpu,
                                                 "server_cpu_per_1k": cpu / 2}}}
            for kind, mbps, cpu in (("shardstream", 500.0, 0.15), ("grpc_raw", 1000.0, 0.12),
                                    ("tcp_raw", 3000.0, 0.01))}},
    }
    doc["targets"] = [t.to_json() for t in evaluate(doc)]
    doc["all_passed"] = False
    return doc


def test_a_complete_document_is_valid_and_round_trips(tmp_path: Path) -> None:
    doc = _document()
    assert validate(doc) == []
    path = write_results(doc, tmp_path / "run.json")
    assert read_results(path) == json.loads(json.dumps(doc))


@pytest.mark.parametrize(("mutate", "problem"), [
    (lambda d: d.pop("machine"), "missing top-level key 'machine'"),
    (lambda d: d.update(schema="other/9"), "schema is 'other/9'"),
    (lambda d: d["machine"].pop("cpu_model"), "machine lacks 'cpu_model'"),
    (lambda d: d["systems"]["dataloader"].update(status="great"), "status 'great'"),
    (lambda d: d["systems"]["dataloader"].update(runs=[]), "status ok but no runs"),
    (lambda d: d["systems"]["dataloader"]["median"].pop("ttfb_s"), "median lacks 'ttfb_s'"),
    (lambda d: d["systems"]["tfdata"].update(reason=""), "without a reason"),
    (lambda d: d["targets"][0].update(status="MAYBE"), "status 'MAYBE'"),
    (lambda d: d["targets"][0].pop("threshold"), "target lacks 'threshold'"),
])
def test_validate_names_what_is_wrong(mutate: Any, problem: str) -> None:
    doc = copy.deepcopy(_document())
    mutate(doc)
    problems = validate(doc)
    assert any(problem in p for p in problems), problems


def test_an_invalid_document_is_not_written(tmp_path: Path) -> None:
    doc = _document()
    doc.pop("targets")
    with pytest.raises(ValueError, match="targets"):
        write_results(doc, tmp_path / "run.json")
    assert not (tmp_path / "run.json").exists()


def test_the_report_shows_every_system_the_transport_and_every_target() -> None:
    doc = _document()
    text = full_report(doc)
    assert "shardstream" in text and "torch DataLoader" in text
    assert "skipped: TensorFlow is not installed" in text
    assert "| 9.6 MB (64 rows) " in text and "0.50x" in text
    # CPU-s per GB of the consumer and of the sender, beside raw gRPC's: 0.15 CPU-s per 150.5 MB
    assert "| 1.00 (0.80) " in text and "| 0.50 (0.40) " in text
    for target in doc["targets"]:
        assert target["name"] in text
    assert "FAIL  samples/s vs torch DataLoader" in text


def test_paired_ratios_are_taken_round_by_round() -> None:
    doc = _document()
    doc["config"]["repetitions"] = 3
    doc["systems"]["shardstream"]["runs"] = [_metrics(v) for v in (900.0, 600.0, 1000.0)]
    doc["systems"]["dataloader"]["runs"] = [_metrics(v) for v in (1000.0, 800.0, 1000.0)]
    text = paired_text(doc)
    assert "torch DataLoader: 0.90 0.75 1.00 (median 0.90x)" in text
    assert "tf.data" not in text  # skipped systems have no rounds
    assert text in full_report(doc)
    doc["systems"]["dataloader"]["runs"].pop()  # a round missing: rounds cannot be paired
    assert paired_text(doc) == ""


def test_markdown_table_pads_columns() -> None:
    table = markdown_table(["a", "long header"], [["xyz", "1"]])
    lines = table.splitlines()
    assert lines[0] == "| a   | long header |"
    assert lines[1] == "|-----|-------------|"
    assert lines[2] == "| xyz | 1           |"
