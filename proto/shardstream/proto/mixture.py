"""A mixture: one job over several datasets (its sources), each drawn at its weight.

The loader takes a `Mixture` where it takes a dataset; the job spec carries it as the `mixture`
option, a JSON object (`as_option`), which the service reads back with `read_mixture`. What the
order of a mixture's epoch is, and what an epoch of a mixture means, is the service's
mixture_plan.py and docs/mixtures.md.

    Mixture([Source("web", "gs://b/web/", weight=0.7),
             Source("code", "gs://b/code/*.jsonl", format="jsonl", weight=0.3)],
            schedule={1000: {"web": 0.5, "code": 0.5}})

`schedule` maps a global step to the weights from that step on (the global step counts batches
of every rank across epochs: epoch * batches_per_rank + step). A source missing from a phase
weighs 0 in it.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shardstream.proto.errors import InvalidJobSpec

MAX_SOURCES = 256
MAX_PHASES = 10_000
TOKEN_COLUMN = "input_ids"  # what a batch's tokens are counted in (per source: stats, status, metrics)


@dataclass(frozen=True)
class Source:
    """One dataset of a mixture: its name (in stats, status and errors), its files, its weight, and
    how to read them (the same `format` and `format_args` a one-dataset job takes)."""

    name: str
    dataset: str | Sequence[str]
    weight: float = 1.0
    format: str = ""
    format_args: Mapping[str, Any] = field(default_factory=dict)

    def entries(self) -> list[str]:
        return [self.dataset] if isinstance(self.dataset, str) else list(self.dataset)


@dataclass(frozen=True)
class Mixture:
    sources: Sequence[Source]
    schedule: Mapping[int, Mapping[str, float]] = field(default_factory=dict)  # step -> weights from it on

    def as_option(self) -> dict[str, Any]:
        """The `mixture` option: what the job spec carries (checked as the service checks it)."""
        names = [s.name for s in self.sources]
        phases = [[0, [s.weight for s in self.sources]]]
        for step in sorted(self.schedule):
            weights = self.schedule[step]
            unknown = set(weights) - set(names)
            if unknown:
                raise InvalidJobSpec(f"the schedule's step {step} weighs source(s) {sorted(unknown)}, "
                                     f"which the mixture does not have ({names})")
            phase = [weights.get(name, 0.0) for name in names]
            if step == 0:
                phases[0][1] = phase
            else:
                phases.append([step, phase])
        option = {"sources": [{"name": s.name, "dataset": s.entries(), "format": s.format,
                               "format_args": dict(s.format_args)} for s in self.sources],
                  "phases": phases}
        refusal = check_mixture(option)
        if refusal:
            raise InvalidJobSpec(refusal)
        return option


@dataclass(frozen=True)
class MixtureSpec:
    """A `mixture` option, read and checked: the sources and the weight phases (step, weights)."""

    names: tuple[str, ...]
    datasets: tuple[tuple[str, ...], ...]
    formats: tuple[str, ...]
    format_args: tuple[dict[str, Any], ...]
    phases: tuple[tuple[int, tuple[float, ...]], ...]


def read_mixture(option: Mapping[str, Any]) -> MixtureSpec:
    """The option's sources and phases; InvalidJobSpec naming what is wrong."""
    refusal = check_mixture(option)
    if refusal:
        raise InvalidJobSpec(refusal)
    sources = option["sources"]
    return MixtureSpec(names=tuple(s["name"] for s in sources),
                       datasets=tuple(tuple(s["dataset"]) for s in sources),
                       formats=tuple(s.get("format", "") for s in sources),
                       format_args=tuple(dict(s.get("format_args") or {}) for s in sources),
                       phases=tuple((int(step), tuple(float(w) for w in weights))
                                    for step, weights in option["phases"]))


def check_mixture(option: Any) -> str | None:
    """The refusal of a `mixture` option ({} is none), or None."""
    if not option:
        return None
    if not isinstance(option, Mapping) or set(option) - {"sources", "phases"}:
        return "mixture must be an object of 'sources' and 'phases' (give a Mixture)"
    sources, phases = option.get("sources"), option.get("phases")
    if not isinstance(sources, list) or not sources:
        return "a mixture needs at least one source"
    if len(sources) > MAX_SOURCES:
        return f"a mixture has at most {MAX_SOURCES} sources, got {len(sources)}"
    names = []
    for i, source in enumerate(sources):
        refusal = _check_source(i, source)
        if refusal:
            return refusal
        names.append(source["name"])
    if len(set(names)) != len(names):
        return f"a mixture's source names are its sources' names in stats and errors: they must differ, got {names}"
    return _check_phases(phases, names)


def _check_source(i: int, source: Any) -> str | None:
    if not isinstance(source, Mapping) or set(source) - {"name", "dataset", "format", "format_args"}:
        return f"mixture source {i} must be an object of name, dataset, format and format_args"
    name, dataset = source.get("name"), source.get("dataset")
    if not isinstance(name, str) or not name or len(name) > 200:
        return f"mixture source {i} needs a name (1 to 200 characters), got {name!r}"
    if not isinstance(dataset, list) or not dataset or not all(isinstance(e, str) and e for e in dataset):
        return f"mixture source {name!r}: dataset must be a non-empty list of URLs, got {dataset!r}"
    if not isinstance(source.get("format", ""), str) or not isinstance(source.get("format_args", {}), Mapping):
        return f"mixture source {name!r}: format must be a name and format_args an object"
    return None


def _check_phases(phases: Any, names: list[str]) -> str | None:
    if not isinstance(phases, list) or not phases:
        return "a mixture needs its weights: phases of [step, [one weight per source]]"
    if len(phases) > MAX_PHASES:
        return f"a mixture's schedule has at most {MAX_PHASES} phases, got {len(phases)}"
    steps = []
    for phase in phases:
        if not (isinstance(phase, list) and len(phase) == 2 and isinstance(phase[0], int)
                and not isinstance(phase[0], bool) and isinstance(phase[1], list)):
            return f"a mixture phase is [step, [weights]], got {phase!r}"
        step, weights = phase
        if len(weights) != len(names):
            return f"the mixture's phase at step {step} gives {len(weights)} weights for {len(names)} sources {names}"
        bad = [(n, w) for n, w in zip(names, weights, strict=True)
               if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) or w < 0]
        if bad:
            return f"the mixture's weights at step {step} must be finite numbers >= 0: {dict(bad)}"
        if not sum(weights) > 0:
            return f"the mixture's weights at step {step} are all 0: some source must have a weight > 0"
        steps.append(step)
    if steps[0] != 0:
        return f"the mixture's first weights are those of step 0, got step {steps[0]}"
    if any(b <= a for a, b in itertools.pairwise(steps)) or steps[-1] >= 2**62:
        return f"the mixture's schedule steps must rise, below 2**62: {steps[:10]}"
    return None


def mixture_changes(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> list[str]:
    """What differs between two `mixture` options, one phrase each (a resume refused names them)."""
    was, now = read_mixture(before or {}) if before else None, read_mixture(after or {}) if after else None
    if was is None or now is None:
        return [] if was == now else [f"mixture: {_brief(before)} -> {_brief(after)}"]
    out = []
    for name in [n for n in was.names if n not in now.names]:
        out.append(f"mixture source {name!r} removed")
    for name in [n for n in now.names if n not in was.names]:
        out.append(f"mixture source {name!r} added")
    if [n for n in was.names if n in now.names] != [n for n in now.names if n in was.names]:
        out.append(f"mixture sources reordered: {list(was.names)} -> {list(now.names)}")
    for name in [n for n in was.names if n in now.names]:
        i, j = was.names.index(name), now.names.index(name)
        for what, a, b in (("dataset", was.datasets[i], now.datasets[j]), ("format", was.formats[i], now.formats[j]),
                           ("format_args", was.format_args[i], now.format_args[j])):
            if a != b:
                out.append(f"mixture source {name!r} {what}: {_brief(a)} -> {_brief(b)}")
    out.extend(_weight_changes(was, now))
    return out


def _weight_changes(was: MixtureSpec, now: MixtureSpec) -> list[str]:
    def table(spec: MixtureSpec) -> dict[int, dict[str, float]]:
        return {step: dict(zip(spec.names, weights, strict=True)) for step, weights in spec.phases}

    before, after = table(was), table(now)
    out = []
    for step in sorted(set(before) | set(after)):
        a, b = before.get(step), after.get(step)
        if a is None or b is None:
            out.append(f"mixture schedule step {step}: {_brief(a)} -> {_brief(b)}")
            continue
        for name in sorted(set(a) | set(b)):
            if a.get(name) != b.get(name):
                out.append(f"mixture weight of {name!r} at step {step}: {a.get(name)} -> {b.get(name)}")
    return out


def sample_tokens(columns: Mapping[str, Any]) -> np.ndarray | None:
    """Each sample's tokens in a batch: its `input_ids`' length without padding (collate="pad"
    adds input_ids_lengths; packed rows say each document's in document_lengths), else the row's
    elements; None for a batch without input_ids. Takes
    numpy arrays (the service) or tensors (the loader)."""
    packed = columns.get("document_lengths")  # rows of several documents (tokenize with pack)
    if packed is not None:
        return np.asarray(packed, dtype=np.int64).reshape(-1)
    ids = columns.get(TOKEN_COLUMN)
    if ids is None or not hasattr(ids, "shape") or not len(ids.shape):
        return None
    lengths = columns.get(f"{TOKEN_COLUMN}_lengths")
    if lengths is not None:
        return np.asarray(lengths, dtype=np.int64).reshape(-1)
    return np.full(int(ids.shape[0]), math.prod(int(d) for d in ids.shape[1:]), dtype=np.int64)


def served_by_source(source_starts: np.ndarray, indices: Sequence[int] | np.ndarray,
                     columns: Mapping[str, Any]) -> tuple[list[int], list[int]]:
    """(samples, tokens) of a batch by source: `source_starts` is each source's first global
    index and the end (DatasetIndex.source_starts, or the sources OpenJob lists)."""
    sources = len(source_starts) - 1
    which = np.searchsorted(source_starts, np.asarray(indices, dtype=np.int64), side="right") - 1
    samples = np.bincount(which, minlength=sources)
    tokens = sample_tokens(columns)
    if tokens is None or len(tokens) != len(which):
        return samples.tolist(), [0] * sources
    return samples.tolist(), np.bincount(which, weights=tokens, minlength=sources).astype(np.int64).tolist()


def _brief(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=list) if value is not None else "none"
    return text if len(text) <= 120 else text[:117] + "..."


__all__ = ["MAX_PHASES", "MAX_SOURCES", "TOKEN_COLUMN", "Mixture", "MixtureSpec", "Source", "check_mixture",
           "mixture_changes", "read_mixture", "sample_tokens", "served_by_source"]
