"""What `shardstream validate` found (validate.py), and how the command line shows it."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class BadSample:
    """A sample that cannot be read or decoded: its global index, where it is, and why."""

    index: int
    where: str
    error: str


@dataclass(frozen=True)
class BadUnit:
    """A unit (row group, run of samples, group of files) of a shard that cannot be read."""

    shard: str
    unit: int
    error: str


@dataclass
class ValidationReport:
    """What `validate` found. `error` is set when the dataset could not be opened at all (a bad
    spec, a missing or broken file found at open); then nothing was read."""

    format: str = ""
    fingerprint: str = ""
    shards: int = 0
    units: int = 0
    samples: int = 0
    schema: list[tuple[str, str]] = field(default_factory=list)
    full: bool = False
    checked: int = 0  # samples decoded (those of unreadable units are not)
    units_read: int = 0
    corrupt: list[BadSample] = field(default_factory=list)
    unreadable: list[BadUnit] = field(default_factory=list)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and not self.corrupt and not self.unreadable


def report_json(report: ValidationReport) -> str:
    """One JSON object, for scripts."""
    document: dict[str, Any] = {
        "format": report.format, "fingerprint": report.fingerprint, "shards": report.shards,
        "units": report.units, "samples": report.samples,
        "schema": [{"name": name, "type": kind} for name, kind in report.schema],
        "full": report.full, "checked": report.checked, "units_read": report.units_read,
        "corrupt": [{"index": b.index, "where": b.where, "error": b.error} for b in report.corrupt],
        "unreadable": [{"shard": b.shard, "unit": b.unit, "error": b.error} for b in report.unreadable],
        "ok": report.ok,
    }
    if report.error is not None:
        document["error"] = report.error
    return json.dumps(document)


def report_text(report: ValidationReport) -> str:
    """What a person reads: the dataset, then every problem, then the verdict."""
    if report.error is not None:
        return f"error: {report.error}\nFAILED: the dataset cannot be opened as a job would open it\n"
    lines = [f"format: {report.format}", f"fingerprint: {report.fingerprint}",
             f"shards: {report.shards} ({report.units} units)", f"samples: {report.samples:,}",
             f"schema: {len(report.schema)} column(s)"]
    lines += [f"  {name}: {kind}" for name, kind in report.schema]
    how = "all: --full" if report.full else "a spread sample; --full checks every one"
    lines.append(f"checked: {report.checked:,} of {report.samples:,} samples ({how}); read {report.units_read:,} "
                 f"of {report.units:,} units")
    lines += [f"corrupt: sample {b.index} ({b.where}): {b.error}" for b in report.corrupt]
    lines += [f"unreadable: unit {b.unit} of {b.shard}: {b.error}" for b in report.unreadable]
    if report.ok:
        lines.append("OK")
    else:
        lines.append(f"FAILED: {len(report.corrupt)} corrupt sample(s), {len(report.unreadable)} unreadable unit(s)")
    return "\n".join(lines) + "\n"


def parse_option(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` from the command line: VALUE as JSON (``seq_len=1024``, ``flip=false``,
    ``size=[224,224]``), or as the plain string when it is not JSON (``dtype=uint16``)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key.strip(), json.loads(value)
    except json.JSONDecodeError:
        return key.strip(), value


__all__ = ["BadSample", "BadUnit", "ValidationReport", "parse_option", "report_json", "report_text"]
