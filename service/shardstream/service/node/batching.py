"""One batch from global indices: read rows, prepare, augment, collate.

Pure given its inputs: the same (job, epoch, indices) yields the same arrays
on any actor, whether a sample's ``prepare`` output comes from the node's
prepared-sample cache (prepared_cache.py) or is made here. Corrupt samples either fail the batch naming file and row, or
are replaced by the next readable sample in global order (deterministic) and
counted.

Given the message header, the built-in image transform's batch of JPEGs is
made by one native call straight into the message (native_batch.py), and
the samples that call does not take by the loop's own steps, into their rows.
Otherwise, given the message header (the batch server's path), a batch is collated
straight into the message that is sent (wire.BatchFrame): pre-decoded
columns are gathered into it, a transform's samples copied into it one by
one as they are made (frame_filler.py), and that is the batch's only copy
before gRPC's. A transform with a collate of
its own, or samples that cannot be framed ahead (their shapes differ, or a
dtype cannot travel), are framed by the batch server, with one copy more.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from shardstream.proto.errors import CorruptSample, ShardstreamError
from shardstream.proto.wire import WIRE_DTYPES, Allocate, BatchFrame, FrameHeader
from shardstream.proto.wire_values import WireTensor
from shardstream.proto.writable_bytes import writable_bytes
from shardstream.service.dataset import UNREADABLE_COLUMN
from shardstream.service.node.batch_bytes import check_batch_bytes, gathered_nbytes, sample_nbytes
from shardstream.service.node.frame_filler import FrameFiller
from shardstream.service.node.job_samples import JobSamples
from shardstream.service.node.native_batch import native_batch
from shardstream.service.node.reader import ShardReader
from shardstream.service.node.sample_steps import (
    UnreadableSample,
    augment_sample,
    keep_samples,
    keep_together,
    made_sample,
    prepare_together,
    readable,
    transform_sample,
)
from shardstream.service.node_messages import DecodeJob, ReadCounters
from shardstream.service.transforms import (
    SampleTransform,  # not `collate`: that name is a module too
)
from shardstream.service.transforms.base import collate, collated_specs
from shardstream.service.transforms.collate import Collation, collate_samples, to_wire
from shardstream.service.transforms.columns import (
    BadValue,
    column_specs,
    gather_arrays,
    gather_variable,
    variable_columns,
)
from shardstream.service.transforms.nulls import MASK
from shardstream.service.transforms.pieces import Piece
from shardstream.service.transforms.sample_seeds import sample_rngs
from shardstream.service.transforms.values import mask_name

MAX_REPLACEMENT_TRIES = 64
STACK = Collation()  # collate="" : stack each key's values


@dataclass
class DecodedBatch:
    arrays: Mapping[str, np.ndarray | WireTensor]
    indices: np.ndarray  # the sample indices actually in the batch, in order
    replaced: int = 0
    decode_seconds: float = 0.0
    reads: ReadCounters = field(default_factory=ReadCounters)  # what reading it cost the actor
    # The serialized Batch when the batch was collated into it (bytes, or where `allocate` put
    # it: wire.SharedRef); `arrays` view it.
    message: Any = None
    # A mixture's batch: (samples, tokens) of each source (shardstream.proto.mixture.served_by_source)
    by_source: tuple[list[int], list[int]] | None = None
    nbytes: int = field(init=False)

    def __post_init__(self) -> None:
        self.nbytes = sum(a.nbytes for a in self.arrays.values())


def decode_batch(job: DecodeJob, reader: ShardReader, transform: SampleTransform | None,
                 epoch: int, indices: np.ndarray, header: FrameHeader | None = None,
                 allocate: Allocate = writable_bytes, prepared_samples: JobSamples | None = None,
                 collation: Collation = STACK) -> DecodedBatch:
    """The batch of these sample indices, collated into the message of `header` (in memory from
    `allocate`) when it is given (see the module's docstring for when it is not). Samples the
    node's prepared-sample cache holds skip reading and ``prepare``; the others are added to it."""
    if transform is None:
        if collation.function is not None:  # a user collate of the rows
            records = []
            for index, row in zip(indices.tolist(), reader.read(indices).to_pylist(), strict=True):
                try:
                    records.append(readable(row))
                except UnreadableSample as exc:
                    raise _corrupt(job, index, exc) from None
            return DecodedBatch(arrays=collate_samples(records, collation), indices=np.asarray(indices))
        pieces = _readable_pieces(job, reader.pieces(indices), indices)
        check_batch_bytes(gathered_nbytes(pieces, job.max_batch_bytes), job.max_batch_bytes, len(indices), len(indices),
                          lambda: f"samples {_first_and_last(job, indices)}")
        try:
            return _gather_columns(job, pieces, indices, header, allocate, collation)
        except ShardstreamError:
            raise
        except BadValue as exc:
            index = int(indices[exc.position])
            raise CorruptSample(f"sample {index} ({job.index.describe(index)}): {exc}") from None
        except (pa.ArrowException, TypeError, ValueError) as exc:  # named here, whatever it was
            raise CorruptSample(f"the batch of samples {_first_and_last(job, indices)} cannot be gathered: "
                                f"{type(exc).__name__}: {exc}") from None
    used = np.array(indices, dtype=np.int64, copy=True)
    prepared = _cached(prepared_samples, used)
    own_collate = getattr(transform, "collate", None)
    augment = getattr(transform, "augment", None)
    frames_ahead = header is not None and own_collate is None and collation.stacks_only
    if frames_ahead and augment is not None and callable(getattr(transform, "crop_batch", None)):
        with _sending_home(prepared_samples):
            made = _native(job, reader, transform, epoch, used, header, allocate, prepared, prepared_samples)
        if made is not None:
            return made
    missing = [position for position in range(len(used)) if position not in prepared]
    rows = dict(zip(missing, reader.rows(used[missing]), strict=True)) if missing else {}
    samples: list[dict[str, Any]] = []
    filler = FrameFiller(header, used, allocate, samples) if frames_ahead else None  # type: ignore[arg-type]
    replaced = 0
    built = 0  # bytes of the samples so far
    rngs = sample_rngs(job.spec.sample_seed, epoch, used.tolist()) if augment is not None else []  # sample_rng's, at once
    augment_into = getattr(transform, "augment_into", None) if filler is not None and augment is not None else None
    ready = prepare_together(transform, rows) if augment_into is None else {}
    keep_together(prepared_samples, used, ready)
    with _sending_home(prepared_samples):
        for position in range(len(used)):
            index = int(used[position])
            try:
                sample = prepared.get(position)
                augmented = False
                if sample is None:
                    into = filler.place() if augment_into is not None and filler is not None else None
                    sample, augmented = made_sample(transform, rows.pop(position), index, prepared_samples,
                                                    augment_into, into, rngs[position] if into is not None else None,
                                                    ready=ready.pop(position, None))
                if augment is not None and not augmented:
                    sample = augment(sample, rngs[position])
            except Exception as exc:
                if job.spec.on_corrupt != "skip":
                    raise _corrupt(job, index, exc) from None
                index, sample = _replacement(job, reader, transform, epoch, index)
                used[position] = index
                replaced += 1
                if filler is not None:
                    filler.stop()  # its message names the planned index
            if filler is not None:
                filler.append(sample)  # copied into the message while it is in cache
            else:
                samples.append(sample)
            built += sample_nbytes(samples[-1])
            check_batch_bytes(built, job.max_batch_bytes, position + 1, len(used),
                              lambda: f"samples {_first_and_last(job, used)}")
    if own_collate is not None:
        return DecodedBatch(arrays=to_wire(own_collate(samples), f"{job.spec.transform}.collate"), indices=used,
                            replaced=replaced)
    filled = filler.filled() if filler is not None else None
    if filled is not None:
        return DecodedBatch(arrays=filled.arrays, indices=used, replaced=replaced, message=filled.message)
    if collation.stacks_only and header is not None and samples and samples[0]:
        framed = _collate_framed(samples, header, used, replaced, allocate)
        if framed is not None:
            return framed
    try:
        arrays = collate_samples(samples, collation)
    except ShardstreamError:
        raise
    except (TypeError, ValueError) as exc:  # a value that cannot travel, shapes that differ
        raise CorruptSample(f"the batch of samples {_first_and_last(job, used)} does not collate: "
                            f"{_culprit(job, samples, used)}{type(exc).__name__}: {exc}") from None
    return DecodedBatch(arrays=arrays, indices=used, replaced=replaced)


@contextlib.contextmanager
def _sending_home(prepared_samples: JobSamples | None) -> Iterator[None]:
    """Samples prepared here for other nodes go to them once the batch is made or has failed."""
    try:
        yield
    finally:
        if prepared_samples is not None:
            prepared_samples.send_to_homes()


def _native(job: DecodeJob, reader: ShardReader, transform: Any, epoch: int, used: np.ndarray,
            header: FrameHeader | None, allocate: Allocate, prepared: dict[int, dict[str, Any]],
            prepared_samples: JobSamples | None) -> DecodedBatch | None:
    """The batch made by the transform's one native call (native_batch.py), and the samples it left
    made here as the loop below makes them; None where that path does not apply, or a sample left
    fails and is to be replaced (the loop replaces it)."""
    assert header is not None
    batch = native_batch(transform, transform.column, job.spec.sample_seed, epoch, reader, used, header, allocate, prepared,
                         prepared_samples.keeps_now if prepared_samples is not None else None, job.max_batch_bytes)
    if batch is None:
        return None
    if prepared_samples is not None:
        prepared_samples.made(batch.seconds, batch.made, len(batch.kept))
    keep_samples(prepared_samples, {int(used[position]): kept for position, kept in batch.kept.items()})
    for position, row in batch.left.items():
        index = int(used[position])
        try:  # the loop's steps, without its rows of the message
            sample, augmented = prepared.get(position), False
            if sample is None:
                assert row is not None
                sample, augmented = made_sample(transform, row, index, prepared_samples, None, None, None,
                                                batch.keeps.get(position))
            if not augmented:
                sample = augment_sample(transform, sample, job.spec.sample_seed, epoch, index)
        except Exception as exc:
            if job.spec.on_corrupt != "skip":
                raise _corrupt(job, index, exc) from None
            return None
        if not batch.fill(position, sample):
            return None
    return DecodedBatch(arrays=batch.frame.arrays, indices=used, message=batch.frame.message)


def _culprit(job: DecodeJob, samples: list[dict[str, Any]], used: np.ndarray) -> str:
    """The first sample holding a value that cannot travel, where it is ("" when none is)."""
    for position, sample in enumerate(samples):
        for key, value in sample.items():
            if isinstance(value, str) or type(value).__module__ == "torch":
                continue
            try:
                dtype = np.asarray(value).dtype.name
            except (TypeError, ValueError):
                dtype = type(value).__name__
            if dtype not in WIRE_DTYPES:
                index = int(used[position])
                return f"sample {index} ({job.index.describe(index)}) gives {key!r} as {dtype}; "
    return ""


def _gather_columns(job: DecodeJob, pieces: list[Piece], indices: np.ndarray, header: FrameHeader | None,
                    allocate: Allocate, collation: Collation) -> DecodedBatch:
    """No transform: the columns gathered into batch arrays (into the message of `header` when
    every column's size is known ahead)."""
    masks = job.spec.nulls == MASK
    variable = variable_columns(pieces[0].table.schema) if pieces else []
    if variable:  # strings, lists: sized as they are gathered, so framed by the batch server
        return DecodedBatch(arrays=_gather_with_variable(pieces, len(indices), variable, collation, masks),
                            indices=np.asarray(indices))
    if header is None:
        return DecodedBatch(arrays=gather_arrays(pieces, len(indices), masks=masks), indices=np.asarray(indices))
    specs = column_specs(pieces[0].table.schema, len(indices), masks)
    frame = BatchFrame(header, specs, np.asarray(indices), 0, allocate)
    return DecodedBatch(arrays=gather_arrays(pieces, len(indices), out=frame.arrays, masks=masks),
                        indices=np.asarray(indices), message=frame.message)


def _readable_pieces(job: DecodeJob, pieces: list[Piece], indices: np.ndarray) -> list[Piece]:
    """The pieces without their format's unreadable marker (a JSON line that does not parse);
    CorruptSample naming the batch's first sample its format could not read. Columns gathered
    without a transform have no replacement (on_corrupt applies to transforms)."""
    found: list[Piece] = []
    first: tuple[int, str] | None = None  # (position in the batch, why)
    for piece in pieces:
        if UNREADABLE_COLUMN not in piece.table.column_names:
            found.append(piece)
            continue
        marks = piece.table.column(UNREADABLE_COLUMN)
        if marks.null_count != len(marks):
            why = marks.take(pa.array(piece.rows)).to_pylist()
            bad = [(int(at), reason) for at, reason in zip(piece.at.tolist(), why, strict=True) if reason is not None]
            if bad and (first is None or bad[0][0] < first[0]):
                first = bad[0]
        found.append(Piece(piece.table.drop_columns([UNREADABLE_COLUMN]), piece.rows, piece.at))
    if first is not None:
        index = int(indices[first[0]])
        raise CorruptSample(f"sample {index} ({job.index.describe(index)}) cannot be read: {first[1]}")
    return found


def _first_and_last(job: DecodeJob, indices: np.ndarray) -> str:
    """The batch's first and last samples, where they are."""
    first, last = int(indices[0]), int(indices[-1])
    if first == last:
        return f"{first} ({job.index.describe(first)})"
    return f"{first} ({job.index.describe(first)}) .. {last} ({job.index.describe(last)})"


def _gather_with_variable(pieces: list[Piece], count: int, variable: list[str],
                          collation: Collation, masks: bool) -> dict[str, np.ndarray | WireTensor]:
    """Every column in schema order: fixed ones gathered, variable ones (and their lengths) after;
    each one's mask after it."""
    fixed = gather_arrays(pieces, count, masks=masks)
    gathered = gather_variable(pieces, count, variable, collation.pad_value, masks)
    out: dict[str, np.ndarray | WireTensor] = {}
    for name in pieces[0].table.column_names:
        found = fixed if name in fixed else gathered
        for key in (name, f"{name}_lengths", mask_name(name)):
            if key in found:
                out[key] = found[key]
    return out


def _corrupt(job: DecodeJob, index: int, exc: Exception) -> CorruptSample:
    where = f"sample {index} ({job.index.describe(index)})"
    if isinstance(exc, UnreadableSample):
        return CorruptSample(f"{where} cannot be read: {exc}")
    return CorruptSample(f"{where} failed in transform {job.spec.transform!r}: {type(exc).__name__}: {exc}")


def _collate_framed(samples: list[dict[str, Any]], header: FrameHeader, used: np.ndarray,
                    replaced: int, allocate: Allocate) -> DecodedBatch | None:
    """The samples stacked into the message of `header`; None when they cannot be (shapes that
    differ, a dtype that cannot travel): collate without a frame then says what is wrong."""
    try:
        frame = BatchFrame(header, collated_specs(samples), used, replaced, allocate)
        arrays = collate(samples, out=frame.arrays)
    except (TypeError, ValueError):
        return None
    return DecodedBatch(arrays=arrays, indices=used, replaced=replaced, message=frame.message)


def _cached(prepared_samples: JobSamples | None, indices: np.ndarray) -> dict[int, dict[str, Any]]:
    """position in the batch -> the sample as prepared earlier, for those the node's cache holds."""
    if prepared_samples is None:
        return {}
    return prepared_samples.get_many([int(index) for index in indices])


def _replacement(job: DecodeJob, reader: ShardReader, transform: SampleTransform, epoch: int,
                 index: int) -> tuple[int, dict[str, Any]]:
    """The next sample after `index` (wrapping) that transforms cleanly."""
    n = job.index.num_rows
    for step in range(1, min(MAX_REPLACEMENT_TRIES, n) + 1):
        candidate = (index + step) % n
        row = reader.read(np.array([candidate])).to_pylist()[0]
        try:
            return candidate, transform_sample(transform, row, job.spec.sample_seed, epoch, candidate)
        except Exception:
            continue
    raise CorruptSample(
        f"sample {index} ({job.index.describe(index)}) is corrupt and none of the next "
        f"{MAX_REPLACEMENT_TRIES} samples could replace it"
    )


__all__ = ["DecodedBatch", "decode_batch"]
