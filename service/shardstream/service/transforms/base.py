"""What a transform is: a deterministic ``prepare`` and a random ``augment``.

``prepare(row)`` depends on the row alone (decode, resize, tokenize), so its
output could be cached across epochs. ``augment(sample, rng)`` is random per
epoch; its generator is seeded from (seed, epoch, global sample index) only,
never from which actor does the work or when.

A transform may also have ``prepare_many(rows)``: ``prepare`` of each of a batch's rows in one
call, a list of each row's sample or of the exception ``prepare`` would raise for it (the tokenize
transform encodes a batch's texts at once). The decode loop uses it where it is there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
import pyarrow as pa

from shardstream.proto.wire import TensorSpec

Sample = dict[str, Any]


@runtime_checkable
class SampleTransform(Protocol):
    def prepare(self, row: Sample) -> Sample: ...

    def augment(self, sample: Sample, rng: np.random.Generator) -> Sample: ...


def sample_rng(seed: int, epoch: int, index: int) -> np.random.Generator:
    """The one generator for sample `index` in `epoch`: a function of these three only."""
    return np.random.default_rng([seed % 2**64, epoch, index])


def collate(samples: Sequence[Sample], out: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Stack per-sample values into batch arrays, key by key: into `out` (arrays shaped as
    `collated_specs` says) when given, else new arrays."""
    if not samples or not samples[0]:
        return {}
    keys = samples[0].keys()
    if out is None:  # C-contiguous, whatever the samples' layout (an image's CHW view of HWC pixels)
        out = {spec.name: np.empty(spec.shape, dtype=spec.dtype) for spec in collated_specs(samples)}
    for key in keys:
        np.stack([np.asarray(s[key]) for s in samples], out=out[key])
    return {key: out[key] for key in keys}


def collated_specs(samples: Sequence[Sample]) -> list[TensorSpec]:
    """The arrays `collate` makes of these samples, before making them: each key's dtype is the
    one np.stack would choose; its shape is the first sample's (stacking checks the others)."""
    return [TensorSpec(key, np.result_type(*(np.asarray(s[key]).dtype for s in samples)),
                       (len(samples), *np.shape(value)))
            for key, value in samples[0].items()]


def check_tensor_column(field: pa.Field, pads: bool = False) -> None:
    """Numeric scalars become [B]; fixed-size numeric lists [B, k]; strings a list of B strings;
    with `pads` (collate="pad"), variable-length lists [B, Lmax] (or [B, Lmax, k])."""
    from shardstream.proto.errors import InvalidJobSpec

    kind = field.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        if not pads:
            raise InvalidJobSpec(f"column {field.name!r} holds lists of varying length ({kind}): collate='pad' "
                                 "pads them to the batch's longest (with <column>_lengths)")
        kind = kind.value_type
    if pa.types.is_fixed_size_list(kind):
        kind = kind.value_type
    if not (pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)):
        raise InvalidJobSpec(
            f"column {field.name!r} has type {field.type}, which does not collate to a tensor "
            "without a transform: leave it out with columns=[...] or choose a transform"
        )


__all__ = ["Sample", "SampleTransform", "check_tensor_column", "collate", "collated_specs", "sample_rng"]
