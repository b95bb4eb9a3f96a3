"""One sample made the per-sample way: its row made readable, prepared (and kept in the node's
cache), augmented with its own generator.

decode_batch's loop makes every sample with these steps; a batch made in one native call
(native_batch.py) makes those it leaves with the same ones, so both give the same sample.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from shardstream.service.dataset import UNREADABLE_COLUMN
from shardstream.service.node.job_samples import JobSamples
from shardstream.service.transforms import SampleTransform, sample_rng

log = logging.getLogger(__name__)


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
                rng: np.random.Generator | None, keep: bool | None = None) -> tuple[dict[str, Any], bool]:
    """(sample, whether it is augmented already) for a sample the node's cache does not hold:
    made straight into its rows of the message (`into`) by the transform's `augment_into` where
    there is one (with the prepared sample from the same decode when the cache takes it now); else
    prepared, and kept. `keep`: whether the cache takes it, where that is decided already."""
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
    if prepared_samples is None:
        return
    try:
        prepared_samples.put(index, sample)
    except Exception:
        log.warning("cannot cache prepared sample %d", index, exc_info=True)


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


__all__ = ["UnreadableSample", "augment_sample", "keep_sample", "made_sample", "prepare_sample", "readable",
           "transform_sample"]
