"""A batch of the image transform made in one native call, straight into the message that is sent.

decode_batch's loop spends Python work on every sample around the native crop: the row turned into
Python objects, a generator made and three draws, the header read, the call, the copy into the
frame. Where a batch's samples are JPEGs in an Arrow binary column beside plain number columns,
this path does the same work per batch instead: the JPEGs' addresses are taken from the row groups'
buffers (no copy into Python bytes), the native library reads their headers, draws each sample's
crop and flip from the seed words of its generator and decodes the crops into the batch's rows in
one call (transforms/jpeg_crop.py, ImageTransform.crop_batch); the number columns are gathered into
their tensors as numpy arrays, each as the dtype its Python value has in the usual path.

Samples the node's prepared-sample cache holds are cropped and flipped from their pixels by a
second native call with the same draws, and their rows are not read.

The bytes are the loop's, sample for sample: samples neither call takes (another kind of image,
damaged ones) are made by decode_batch as the loop makes them, into their rows. `native_batch`
returns None, having done and counted nothing, where it does not apply, and decode_batch runs the
loop; it also runs it when one of the samples left to it fails and is to be replaced
(on_corrupt="skip"), and the cache is then offered that batch's samples twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from shardstream.proto.wire import Allocate, BatchFrame, FrameHeader, TensorSpec
from shardstream.service.dataset import UNREADABLE_COLUMN
from shardstream.service.node.reader import ShardReader, python_rows
from shardstream.service.node.row_group_views import VIEWS, NativeView, number_dtype, plain
from shardstream.service.transforms.pieces import Piece
from shardstream.service.transforms.sample_seeds import seed_words

PYTHON_SCALAR_BYTES = 8  # what batch_bytes.sample_nbytes counts for a Python number


@dataclass
class NativeBatch:
    """A batch framed and mostly made: the caller makes the samples of `left` (as the loop does,
    with the keep decisions of `keeps` where one was made), `fill`s each into its rows, and keeps
    the prepared samples of `kept` in the node's cache."""

    frame: BatchFrame
    left: dict[int, dict[str, Any] | None]  # position -> its row (None: the cache holds the sample)
    keeps: dict[int, bool]  # position -> whether the sample is kept, decided already (keeps_now)
    kept: dict[int, dict[str, Any]]  # position -> its prepared sample, to keep
    made: int = 0  # samples the first native call made
    seconds: float = 0.0  # the native call's and the kept rows' time (making `kept` costs keeping: JobSamples.made)

    def fill(self, position: int, sample: dict[str, Any]) -> bool:
        """A sample made as the loop makes it, written into its rows: False where it does not fit them."""
        arrays = self.frame.arrays
        if sample.keys() != arrays.keys():
            return False
        values = {key: np.asarray(value) for key, value in sample.items()}
        if not all(value.shape == arrays[key].shape[1:] and value.dtype == arrays[key].dtype
                   for key, value in values.items()):
            return False
        for key, value in values.items():
            arrays[key][position] = value
        return True


def native_batch(transform: Any, image: str, seed: int, epoch: int, reader: ShardReader, used: np.ndarray,
                 header: FrameHeader, allocate: Allocate, cached: dict[int, dict[str, Any]],
                 keeps_now: Callable[[int], bool] | None, max_batch_bytes: int) -> NativeBatch | None:
    """The batch of sample indices `used`, framed into the message of `header` and made but for the
    samples neither native call took; None, with nothing done, where this path does not apply.
    `cached`: position -> the prepared sample the node's cache holds (its rows are not read: its
    augment is the second native call); `keeps_now` (None: no cache) decides whether the samples made
    now are kept."""
    shape = transform.batch_shape()
    words = seed_words(seed, epoch, used.tolist()) if shape is not None else None
    if shape is None or words is None:
        return None
    count = len(used)
    take = np.ones(count, bool)  # the samples the first call decodes: those the cache does not hold
    take[list(cached)] = False
    missing = np.flatnonzero(take)
    pieces = reader.pieces(used[missing]) if len(missing) else []
    views = _views(pieces, image)
    if views is None:
        return None
    names = views[0].names if views else _cached_columns(next(iter(cached.values())), image, reader.index.schema)
    if names is None:
        return None
    schema = views[0].schema if views else reader.index.schema
    dtypes = {name: number_dtype(schema.field(name).type) for name in names if name != image}
    per_sample = int(np.prod(shape)) + PYTHON_SCALAR_BYTES * len(dtypes)  # as the loop counts it
    if per_sample * count > max_batch_bytes:
        return None  # the loop raises, naming where it passed the bound
    specs = [TensorSpec(name, np.dtype(np.uint8), (count, *shape)) if name == image
             else TensorSpec(name, dtypes[name], (count,)) for name in names]  # type: ignore[arg-type]
    frame = BatchFrame(header, specs, used, 0, allocate)
    if cached and not _fill_cached(frame, cached, dtypes):
        return None
    cropped = transform.crop_prepared_batch({position: sample[image] for position, sample in cached.items()},
                                            words, frame.arrays[image]) if cached else []
    pointers, sizes = np.zeros(count, np.uint64), np.zeros(count, np.uint64)
    for piece, view in zip(pieces, views, strict=True):
        at = missing[piece.at]
        pointers[at], sizes[at] = view.pointers[piece.rows], view.sizes[piece.rows]
        for name in dtypes:
            frame.arrays[name][at] = view.numbers[name][piece.rows]
    keep = np.zeros(count, bool)
    if keeps_now is not None and len(missing):
        keep[missing] = keeps_now(len(missing))  # writes come after the call: one answer for all
    started = time.perf_counter()
    done, kept = transform.crop_batch(pointers, sizes, take, words, frame.arrays[image], keep)
    if kept:  # part of what keeping them costs (`seconds`)
        kept.update(_prepared_rows(pieces, missing, kept, image))
    seconds = time.perf_counter() - started
    made = np.flatnonzero(take & ~done).tolist()  # taken, not made natively: the loop's steps make them
    rows = dict(zip(made, reader.rows(used[made]), strict=True)) if made else {}
    left: dict[int, dict[str, Any] | None] = {position: rows.get(position) for position in
                                              sorted([*made, *(set(cached) - set(cropped))])}
    return NativeBatch(frame, left, {position: bool(keep[position]) for position in made}, kept, int(done.sum()),
                       seconds)


def _prepared_rows(pieces: list[Piece], missing: np.ndarray, pixels: dict[int, np.ndarray],
                   image: str) -> dict[int, dict[str, Any]]:
    """position -> the prepared sample of each position of `pixels`: its row as ``reader.rows`` gives
    it, with its decoded image in place of the JPEG, taken from the row groups the batch already
    holds (the JPEG is never copied into Python bytes)."""
    out: dict[int, dict[str, Any]] = {}
    for piece in pieces:
        at = missing[piece.at].tolist()
        chosen = [k for k, position in enumerate(at) if position in pixels]
        for k, sample in zip(chosen, python_rows(piece, chosen, without=image), strict=True):
            sample.pop(UNREADABLE_COLUMN, None)
            sample[image] = pixels[at[k]]
            out[at[k]] = sample
    return out


def _cached_columns(sample: dict[str, Any], image: str, schema: pa.Schema) -> list[str] | None:
    """The batch's tensors in the loop's order when the cache holds every sample: the prepared
    sample's keys (the row's), when the dataset's `schema` has them as this path's columns."""
    names = list(sample)
    return names if all(name in schema.names for name in names) and plain(schema, names, image) else None


def _fill_cached(frame: BatchFrame, cached: dict[int, dict[str, Any]], dtypes: dict[str, np.dtype | None]) -> bool:
    """The number values of the samples the cache holds, into their rows: False where one is not a
    value of its tensor's dtype (the loop decides what to make of it)."""
    positions = list(cached)
    for sample in cached.values():
        if sample.keys() != frame.arrays.keys():
            return False
    for name, dtype in dtypes.items():
        values = np.asarray([cached[position][name] for position in positions])
        if values.dtype != dtype or values.shape != (len(positions),):
            return False
        frame.arrays[name][positions] = values
    return True


def _views(pieces: list[Piece], image: str) -> list[NativeView] | None:
    """The pieces' row-group views, when every one has them (row_group_views.py) with one schema; else None."""
    views = [view for view in (VIEWS.get(piece.table, image) for piece in pieces) if view is not None]
    if len(views) < len(pieces):
        return None
    if views and not all(view.schema is views[0].schema or view.schema.equals(views[0].schema) for view in views):
        return None
    return views


__all__ = ["NativeBatch", "native_batch"]
