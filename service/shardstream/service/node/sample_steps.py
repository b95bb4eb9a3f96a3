"""One sample made the per-sample way: its row made readable, prepared (and kept in the node's
cache), augmented with its own generator.

decode_batch's loop makes every sample with these steps; a batch made in one native call
(native_batch.py) makes those it leaves with the same ones, so both give the same sample.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from shardstream.service.dataset import UNREADABLE_COLUMN
from shardstream.service.node.job_samples import JobSamples
from shardstream.service.transforms import SampleTransform, sample_rng


class UnreadableSample(Exception):
    """A sample its format could not read; the message says why (it is named where it is caught)."""


def readable(row: dict[str, Any]) -> dict[str, Any]:
    """The row without its format's unreadable marker; UnreadableSample when the format could not
    read it (a file that does not exist)."""
    unreadable = row.pop(UNREADABLE_COLUMN, None)
    if unreadable is not None:
        raise UnreadableSample(unreadable)
    return row


def made_sample(transform: SampleTransform, row: dict[str, Any], index: int, prepared_samples: JobSamples | None,
                augment_into: Any, into: dict[str, np.ndarray] | None,
                rng: np.random.Generator | None, keep: bool | None = None,
                ready: dict[str, Any] | Exception | None = None) -> tuple[dict[str, Any], bool]:
    """(sample, whether it is augmented already) for a sample the node's cache does not hold:
    made straight into its rows of the message (`into`) by the transform's `augment_into` where
    there is one (with the prepared sample from the same decode when the cache takes it now); else
    prepared, and kept. `keep`: whether the cache takes it, where that is decided already;
    `ready`: its sample as ``prepare_together`` made it (kept with the batch's already), or the
    error that raised."""
    if isinstance(ready, Exception):
        raise ready
    if ready is not None:
        return ready, False
    row = readable(row)
    if keep is None:
        keep = prepared_samples is not None and prepared_samples.keeps_now()
    if into is not None:
        made = augment_into(row, rng, into, keep)
        if made is not None:
            sample, prepared = made
            if prepared is not None:
                keep_sample(prepared_samples, index, prepared)
            return sample, True
    sample = prepare_sample(transform, row)
    if keep:
        keep_sample(prepared_samples, index, sample)
    return sample, False


def keep_sample(prepared_samples: JobSamples | None, index: int, sample: dict[str, Any]) -> None:
    """Add a freshly prepared sample the cache takes (`keeps_now`) to it (before augment, which may
    change it in place); a cache that fails costs a warning, never the batch."""
    keep_samples(prepared_samples, {index: sample})


def keep_samples(prepared_samples: JobSamples | None, samples: dict[int, dict[str, Any]]) -> None:
    """keep_sample of each (index -> sample), with one charge to the write budget."""
    if prepared_samples is not None and samples:
        prepared_samples.put_many(samples)


def prepare_together(transform: SampleTransform, rows: dict[int, dict[str, Any]]
                     ) -> dict[int, dict[str, Any] | Exception]:
    """position -> its row prepared, or the error that raised, made in one call by a transform with
    ``prepare_many`` (a tokenizer encodes a batch's texts at once); {} for one without it."""
    prepare_many = getattr(transform, "prepare_many", None)
    if prepare_many is None or not rows:
        return {}
    out: dict[int, dict[str, Any] | Exception] = {}
    readable_rows: dict[int, dict[str, Any]] = {}
    for position, row in rows.items():
        try:
            readable_rows[position] = readable(row)
        except UnreadableSample as exc:
            out[position] = exc
    out.update(zip(readable_rows, prepare_many(list(readable_rows.values())), strict=True))
    return out


def keep_together(prepared_samples: JobSamples | None, used: np.ndarray,
                  ready: dict[int, dict[str, Any] | Exception]) -> None:
    """The samples ``prepare_together`` made (position -> sample) kept in the node's cache, with one
    keep decision for the batch (writes come after the call)."""
    made = {int(used[position]): sample for position, sample in ready.items() if not isinstance(sample, Exception)}
    if made and prepared_samples is not None and prepared_samples.keeps_now(len(made)):
        keep_samples(prepared_samples, made)


def prepare_sample(transform: SampleTransform, row: dict[str, Any]) -> dict[str, Any]:
    prepare = getattr(transform, "prepare", None)
    return prepare(readable(row)) if prepare else readable(row)


def augment_sample(transform: SampleTransform, sample: dict[str, Any], seed: int, epoch: int,
                   index: int) -> dict[str, Any]:
    augment = getattr(transform, "augment", None)
    return augment(sample, sample_rng(seed, epoch, index)) if augment else sample


def transform_sample(transform: SampleTransform, row: dict[str, Any], seed: int, epoch: int,
                     index: int) -> dict[str, Any]:
    """`row` prepared and augmented, as a batch holds it (without the prepared-sample cache)."""
    return augment_sample(transform, prepare_sample(transform, row), seed, epoch, index)


__all__ = ["UnreadableSample", "augment_sample", "keep_sample", "keep_samples", "keep_together", "made_sample",
           "prepare_sample", "prepare_together", "readable", "transform_sample"]
