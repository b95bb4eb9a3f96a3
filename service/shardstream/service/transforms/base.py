"""What a transform is: a deterministic ``prepare`` and a random ``augment``.

``prepare(row)`` depends on the row alone (decode, resize, tokenize), so its
output could be cached across epochs. ``augment(sample, rng)`` is random per
epoch; its generator is seeded from (seed, epoch, global sample index) only,
never from which actor does the work or when.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
import pyarrow as pa

Sample = dict[str, Any]


@runtime_checkable
class SampleTransform(Protocol):
    def prepare(self, row: Sample) -> Sample: ...

    def augment(self, sample: Sample, rng: np.random.Generator) -> Sample: ...


def sample_rng(seed: int, epoch: int, index: int) -> np.random.Generator:
    """The one generator for sample `index` in `epoch`: a function of these three only."""
    return np.random.default_rng([seed % 2**64, epoch, index])


def collate(samples: Sequence[Sample]) -> dict[str, np.ndarray]:
    """Stack per-sample values into batch arrays, key by key."""
    if not samples or not samples[0]:
        return {}
    keys = samples[0].keys()
    return {key: np.stack([np.asarray(s[key]) for s in samples]) for key in keys}


def check_tensor_column(field: pa.Field) -> None:
    """Numeric scalars become [B]; fixed-size numeric lists become [B, k]."""
    kind = field.type
    if pa.types.is_fixed_size_list(kind):
        kind = kind.value_type
    if not (pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)):
        from shardstream.proto.errors import InvalidJobSpec

        raise InvalidJobSpec(
            f"column {field.name!r} has type {field.type}, which does not collate to a tensor "
            "without a transform: leave it out with columns=[...] or choose a transform"
        )


__all__ = ["Sample", "SampleTransform", "check_tensor_column", "collate", "sample_rng"]
