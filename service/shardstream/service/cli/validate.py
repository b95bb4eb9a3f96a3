"""`shardstream validate`: the dry run before a long job, in this process, with the service's code.

A job that dies hours in on one corrupt JPEG, or that is refused at open
because a token file is truncated, costs a cluster's time. This opens the
dataset exactly as the service would (``index_dataset``, ``build_transform``,
``transforms/job_schema.check_job_schema``), reads units through the decoders' ``StorageReader``,
and runs samples through the decoders' per-sample path (``transform_sample``
of node/batching.py; with no transform, ``decode_batch`` itself
gathers the columns into batch arrays), so what passes here passes there.

What is checked: every sample with ``sample=None`` (``--full``), else about
`sample` samples spread evenly over the dataset (one drawn from each of that
many equal strata, with a fixed seed: the same ones every run), the units
they lie in, and the first unit of every shard, so every file is opened at
least once. Decoded samples must also stack into one batch (the same keys and
shapes), unless the transform collates them itself.

Nothing here prints: `validate` returns a `ValidationReport`, and
`report_text` / `report_json` (validate_report.py) render it for the command line.
"""

from __future__ import annotations

import logging
import os
import threading
from array import array
from collections.abc import Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
from tqdm import tqdm

from shardstream.service.cli.validate_report import (
    BadSample,
    BadUnit,
    ValidationReport,
    parse_option,
    report_json,
    report_text,
)
from shardstream.service.dataset import DatasetIndex, Shard
from shardstream.service.formats import index_dataset, job_format_args
from shardstream.service.node.batching import decode_batch
from shardstream.service.node.read_counters import SharedReadCounters
from shardstream.service.node.reader import RowGroupSource, ShardReader
from shardstream.service.node.sample_steps import UnreadableSample, transform_sample
from shardstream.service.node.storage_reader import StorageReader
from shardstream.service.node_messages import DecodeJob
from shardstream.service.transforms import SampleTransform, build_transform
from shardstream.service.transforms.collate import Collation, build_collation
from shardstream.service.transforms.job_schema import check_job_schema

log = logging.getLogger(__name__)

DEFAULT_SAMPLE = 64
SAMPLE_SEED = 0  # which samples `--sample K` picks: the same ones every run
AUGMENT_SEED, AUGMENT_EPOCH = 0, 0  # augment runs as it would for a job with seed 0, epoch 0
CHUNK_SAMPLES = 32  # samples one task runs through a transform


def validate(dataset: tuple[str, ...], *, format: str = "", format_args: dict[str, Any] | None = None,
             transform: str = "", transform_args: dict[str, Any] | None = None,
             columns: tuple[str, ...] = (), collate: str = "", pad_value: float = 0.0, nulls: str = "",
             sample: int | None = DEFAULT_SAMPLE, workers: int | None = None,
             progress: bool | None = None) -> ValidationReport:
    """Open `dataset` as a job would and decode `sample` of its samples (None: all of them) on
    `workers` threads. `progress`: a progress bar on stderr (None: only on a terminal). `nulls`: as
    the job's ("" refuses nulls a column's tensor cannot hold, "mask" delivers them with masks)."""
    if sample is not None and sample < 1:
        raise ValueError(f"sample must be at least 1, got {sample}")
    transform_args = dict(transform_args or {})
    report = ValidationReport(format=format, full=sample is None)
    try:
        built = build_transform(transform, transform_args, _own_module(transform))
        collation = build_collation(collate, pad_value, _own_module(collate))
        index = index_dataset(dataset, columns, format=format,
                              format_args=job_format_args(format, format_args, transform_args))
        check_job_schema(index.schema, built, collate, index, nulls)
    except Exception as exc:  # whatever OpenJob would refuse the job with
        report.error = _describe(exc)
        return report
    report.format, report.fingerprint = index.format, index.fingerprint
    report.shards, report.samples = len(index.shards), index.num_rows
    report.units = sum(len(shard.row_group_rows) for shard in index.shards)
    report.schema = [(f.name, str(f.type)) for f in index.schema]
    chosen = None if sample is None else sample_indices(index.num_rows, sample)
    total = index.num_rows if chosen is None else len(chosen)
    log.info("checking %d of %d samples of %s (%d shard(s)) on %d thread(s)", total, index.num_rows,
             list(dataset), len(index.shards), workers or os.cpu_count() or 1)
    # A transform runs sample by sample: a large unit's samples are spread over the workers. Plain
    # columns are gathered a unit at a time, vectorised, as a decoder gathers a batch.
    chunk = CHUNK_SAMPLES if built is not None else None
    _Checker(index, list(columns) or None, built, collation, nulls).run(_tasks(index, chosen, chunk), total, report,
                                                       workers or os.cpu_count() or 1, progress)
    return report


def sample_indices(num_rows: int, count: int, seed: int = SAMPLE_SEED) -> np.ndarray:
    """`count` global indices spread evenly over [0, num_rows): one drawn from each of `count`
    equal strata, the same ones for the same arguments; all of them when count >= num_rows."""
    if count >= num_rows:
        return np.arange(num_rows, dtype=np.int64)
    strata = np.arange(count + 1, dtype=np.int64) * num_rows // count
    rng = np.random.default_rng(seed)
    return strata[:-1] + rng.integers(0, strata[1:] - strata[:-1])


def _own_module(transform: str) -> tuple[str, ...]:
    """A user transform's own module, allowed: this runs the user's code on their own machine."""
    module, sep, _ = transform.partition(":")
    return (module,) if sep and module else ()


def _describe(exc: BaseException) -> str:
    """The error on one line (Arrow's can span several)."""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"


# -- what to read ---------------------------------------------------------------------------------

class _HeldUnits(RowGroupSource):
    """The units the tasks in flight have read, served to the ShardReader that `decode_batch`
    reads rows through, so no unit is read twice. (A unit not held is read from storage.)"""

    def __init__(self, storage: StorageReader) -> None:
        super().__init__(storage)
        self._held: dict[tuple[str, int], pa.Table] = {}
        self._lock = threading.Lock()

    def hold(self, shard: Shard, unit: int, table: pa.Table | None) -> None:
        with self._lock:
            if table is None:
                self._held.pop((shard.identity, unit), None)
            else:
                self._held[(shard.identity, unit)] = table

    def cached(self, wanted: list[tuple[Shard, int]],
               columns: tuple[str, ...] | None) -> list[pa.Table | None]:  # noqa: ARG002 (one selection a run)
        with self._lock:
            return [self._held.get((shard.identity, unit)) for shard, unit in wanted]


class _Unit:
    """One unit's table, read by whichever of its tasks runs first and dropped after the last, so
    a unit is read once and only a window of units is held at a time."""

    def __init__(self, shard: Shard, number: int) -> None:
        self.shard, self.number = shard, number
        self.tasks = 0  # set once its tasks are cut, before any runs
        self._table: pa.Table | None = None
        self._tried = False
        self._lock = threading.Lock()

    def table(self, units: _HeldUnits, columns: list[str] | None, outcome: _Outcome) -> pa.Table | None:
        """The table, or None when it cannot be read: the task that tried says so in `outcome`
        (a unit that cannot be read is reported once), and counts the read when it worked."""
        with self._lock:
            if not self._tried:
                self._tried = True
                try:
                    self._table = units.storage.row_group(self.shard, self.number, columns)
                except Exception as exc:  # typed by row_group: UnreadableShard, DatasetNotFound...
                    outcome.unreadable = BadUnit(self.shard.url, self.number, _describe(exc))
                else:
                    outcome.read = True
                    units.hold(self.shard, self.number, self._table)
            return self._table

    def done(self, units: _HeldUnits) -> None:
        """One of its tasks finished: after the last, the table goes."""
        with self._lock:
            self.tasks -= 1
            if self.tasks == 0:
                self._table = None
                units.hold(self.shard, self.number, None)


@dataclass(frozen=True)
class _Task:
    unit: _Unit
    rows: np.ndarray  # rows of the unit to decode, ascending (may be none: the unit is only opened)
    indices: np.ndarray  # their global indices


def _tasks(index: DatasetIndex, chosen: np.ndarray | None, chunk: int | None) -> Iterator[_Task]:
    """In dataset order, tasks of up to `chunk` samples (None: a whole unit's). With `chosen`
    None, every unit and all its samples (made as they are needed: a billion rows are not listed
    at once); else the units the chosen samples lie in, and each shard's first unit, so every
    file is opened."""
    starts = np.cumsum([0, *index.row_group_rows], dtype=np.int64)  # each unit's first sample
    by_unit: dict[int, np.ndarray] = {}
    if chosen is not None and len(chosen):
        which = np.searchsorted(starts, chosen, side="right") - 1
        for part in np.split(np.arange(len(chosen)), np.flatnonzero(np.diff(which)) + 1):
            by_unit[int(which[part[0]])] = chosen[part]
    number = 0  # the unit's place in the whole dataset
    for shard in index.shards:
        for in_shard in range(len(shard.row_group_rows)):
            first = int(starts[number])
            if chosen is None:
                indices = np.arange(first, int(starts[number + 1]), dtype=np.int64)
            else:
                indices = by_unit.get(number, np.empty(0, dtype=np.int64))
            number += 1
            if chosen is not None and not len(indices) and in_shard:
                continue
            unit = _Unit(shard, in_shard)
            step = chunk or max(1, len(indices))
            pieces = [indices[a:a + step] for a in range(0, len(indices), step)] or [indices]
            unit.tasks = len(pieces)
            yield from (_Task(unit, piece - first, piece) for piece in pieces)


# -- decoding -------------------------------------------------------------------------------------

Signature = tuple[tuple[str, tuple[int, ...]], ...]  # a decoded sample's keys and shapes


@dataclass
class _Outcome:
    planned: int = 0  # samples the task was to decode
    checked: int = 0
    corrupt: list[BadSample] = field(default_factory=list)
    unreadable: BadUnit | None = None
    read: bool = False
    shapes: dict[Signature, list[int]] = field(default_factory=dict)  # signature -> indices


class _Checker:
    """Reads units and decodes samples as a decoder does, on a pool of threads."""

    def __init__(self, index: DatasetIndex, columns: list[str] | None,
                 transform: SampleTransform | None, collation: Collation, nulls: str = "") -> None:
        self.index = index
        self.columns = columns
        self.transform = transform
        self.units = _HeldUnits(StorageReader(SharedReadCounters()))
        self.reader = ShardReader(index, columns, self.units)
        self.job = DecodeJob.alone("validate", index, columns=tuple(columns or ()), seed=AUGMENT_SEED,
                                   collate=collation.name, pad_value=collation.pad_value, nulls=nulls)
        self.collation = collation
        # Samples must stack into a batch, unless they are padded or collated by a function.
        self.check_shapes = (transform is not None and getattr(transform, "collate", None) is None
                             and collation.stacks_only)

    def run(self, tasks: Iterable[_Task], total: int, report: ValidationReport, workers: int,
            progress: bool | None) -> None:
        """Run `tasks` (`total` samples) into `report`, a bounded window of them at a time."""
        shapes: dict[Signature, array[int]] = {}  # 8 bytes per sample transformed: small beside decoding it
        window = 2 * workers  # tasks in flight: a bounded number of units held in memory
        with ThreadPoolExecutor(workers, thread_name_prefix="shardstream-validate") as pool, \
                tqdm(total=total, desc="decoding", unit="sample", disable=None if progress is None else not progress,
                     leave=False) as bar:
            pending: set[Future[_Outcome]] = set()

            def collect(done: Iterable[Future[_Outcome]]) -> None:
                for future in done:
                    outcome = future.result()
                    report.checked += outcome.checked
                    report.units_read += outcome.read
                    report.corrupt.extend(outcome.corrupt)
                    if outcome.unreadable is not None:
                        report.unreadable.append(outcome.unreadable)
                    for signature, indices in outcome.shapes.items():
                        shapes.setdefault(signature, array("q")).extend(indices)
                    bar.update(outcome.planned)

            try:
                for task in tasks:
                    if len(pending) >= window:
                        done, pending = wait(pending, return_when=FIRST_COMPLETED)
                        collect(done)
                    pending.add(pool.submit(self._check, task))
                collect(wait(pending).done)
            except BaseException:
                pool.shutdown(cancel_futures=True)
                raise
        report.corrupt.extend(self._odd_shapes(shapes))
        report.corrupt.sort(key=lambda bad: bad.index)
        report.unreadable.sort(key=lambda bad: (bad.shard, bad.unit))

    def _check(self, task: _Task) -> _Outcome:
        outcome = _Outcome(planned=len(task.indices))
        try:
            table = task.unit.table(self.units, self.columns, outcome)
            if table is not None and len(task.rows):
                if self.transform is None:
                    self._gather(task, outcome)
                else:
                    self._decode(self.transform, table, task, outcome)
        finally:
            task.unit.done(self.units)
        return outcome

    def _decode(self, transform: SampleTransform, table: pa.Table, task: _Task, outcome: _Outcome) -> None:
        """Each sample through prepare and augment, exactly as decode_batch runs them."""
        rows = table.take(pa.array(task.rows)).to_pylist()
        for index, row in zip(task.indices.tolist(), rows, strict=True):
            outcome.checked += 1
            try:
                sample = transform_sample(transform, row, AUGMENT_SEED, AUGMENT_EPOCH, index)
            except UnreadableSample as exc:
                outcome.corrupt.append(BadSample(index, self.index.describe(index), f"cannot be read: {exc}"))
                continue
            except Exception as exc:
                outcome.corrupt.append(BadSample(index, self.index.describe(index), _describe(exc)))
                continue
            if self.check_shapes:
                signature = tuple(sorted((key, tuple(np.shape(value))) for key, value in sample.items()))
                outcome.shapes.setdefault(signature, []).append(index)

    def _gather(self, task: _Task, outcome: _Outcome) -> None:
        """No transform: the samples as a batch, by decode_batch itself (plain columns gathered, a
        null refused); sample by sample to name them when the whole chunk fails."""
        outcome.checked += len(task.indices)
        try:
            decode_batch(self.job, self.reader, None, AUGMENT_EPOCH, task.indices, collation=self.collation)
            return
        except Exception:
            pass
        for index in task.indices.tolist():
            try:
                decode_batch(self.job, self.reader, None, AUGMENT_EPOCH, np.array([index], dtype=np.int64),
                             collation=self.collation)
            except Exception as exc:
                outcome.corrupt.append(BadSample(index, self.index.describe(index), _describe(exc)))

    def _odd_shapes(self, shapes: dict[Signature, array[int]]) -> list[BadSample]:
        """Samples whose keys or shapes differ from most samples': a batch holding them would not
        stack. The most common kind is taken as right (the earliest one on a tie)."""
        if len(shapes) < 2:
            return []
        common = max(shapes, key=lambda s: (len(shapes[s]), -min(shapes[s])))
        expected = _shape_text(common)
        return [BadSample(index, self.index.describe(index),
                          f"does not stack into a batch with the others: it has {_shape_text(signature)} where "
                          f"{len(shapes[common])} sample(s) have {expected}")
                for signature, indices in shapes.items() if signature != common for index in indices]


def _shape_text(signature: Signature) -> str:
    return "{" + ", ".join(f"{key}: {list(shape)}" for key, shape in signature) + "}"


__all__ = ["BadSample", "BadUnit", "ValidationReport", "parse_option", "report_json", "report_text",
           "sample_indices", "validate"]
