"""How a batch's samples become its arrays: stacked, padded, or by a user's function.

``collate=""`` (the default) stacks each key's values: numbers and arrays of
one shape become ``[B, ...]`` arrays, strings a list of strings. ``"pad"``
also pads variable-length values (a Python list, a 1-D array, a list column
of the dataset) along their first axis to the batch's longest, with
``pad_value``, and adds ``<key>_lengths`` (int64 [B]). ``"module:function"``
is a user collate, allowlisted like transforms: a function from the list of
per-sample dicts to a dict of arrays, tensors or lists of strings.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardstream.proto.errors import InvalidJobSpec, UnknownTransform
from shardstream.proto.wire import WIRE_DTYPES
from shardstream.proto.wire_values import WireTensor, bfloat16_bits, pack_strings
from shardstream.service.transforms import import_allowed
from shardstream.service.transforms.base import Sample

Batch = dict[str, "np.ndarray | WireTensor"]
PAD = "pad"


@dataclass(frozen=True)
class Collation:
    name: str = ""  # "", "pad" or "module:function"
    pad_value: float = 0.0
    function: Callable[[list[Sample]], Mapping[str, Any]] | None = None

    @property
    def pads(self) -> bool:
        return self.name == PAD

    @property
    def stacks_only(self) -> bool:
        """Fixed-shape stacking: the batch's arrays can be framed before they are made."""
        return not self.name


def build_collation(name: str, pad_value: float, allowed_modules: tuple[str, ...]) -> Collation:
    if name in ("", PAD):
        return Collation(name, pad_value)
    module_name, sep, attr = name.partition(":")
    if not sep or not module_name or not attr:
        raise UnknownTransform(f"unknown collate {name!r}: built-ins are '' (stack) and 'pad'; a user collate "
                               "is named 'package.module:function'")
    return Collation(name, pad_value, import_allowed(name, allowed_modules, "collate"))


def collate_samples(samples: Sequence[Sample], collation: Collation) -> Batch:
    """The batch of `samples` (per-sample dicts) as `collation` says."""
    if collation.function is not None:
        return to_wire(collation.function(list(samples)), collation.name)
    if not samples:
        return {}
    out: Batch = {}
    for key in samples[0]:
        values = [sample[key] for sample in samples]
        if all(isinstance(v, str) for v in values):
            out[key] = pack_strings(values)
            continue
        arrays, bits = _arrays(values)
        if collation.pads and _variable(values[0]):
            fill = _bfloat16_bits_of(collation.pad_value) if bits else collation.pad_value
            padded, lengths = pad([np.asarray(a) for a in arrays], fill, key)
            out[key] = _travelling(padded, bits, key, "the samples give")
            out[f"{key}_lengths"] = lengths
        else:
            out[key] = _travelling(_stacked(arrays, key), bits, key, "the samples give")
    return out


def _stacked(arrays: Sequence[Any], key: str) -> np.ndarray:
    """np.stack's [B, ...]; values whose shapes differ are a ValueError naming `key`, their shapes,
    and, for sequences, collate='pad'."""
    try:
        return np.stack(arrays)
    except ValueError as exc:
        shapes = sorted({np.shape(a) for a in arrays})
        if len(shapes) < 2:
            raise
        hint = ": collate='pad' pads them to the batch's longest" if _variable(arrays[0]) else ""
        raise ValueError(f"{key!r} has values of {len(shapes)} shapes ({', '.join(map(str, shapes[:3]))}"
                         f"{', ...' if len(shapes) > 3 else ''}), which do not stack ({exc}){hint}") from None


def _variable(value: Any) -> bool:
    """A value `pad` pads: a list, or a 1-D array (a sequence of numbers)."""
    return isinstance(value, list) or (hasattr(value, "ndim") and value.ndim == 1)


def pad(values: Sequence[np.ndarray], pad_value: float, key: str) -> tuple[np.ndarray, np.ndarray]:
    """[B, Lmax, ...] with `pad_value` past each value's length, and the lengths (int64 [B])."""
    lengths = np.array([len(v) for v in values], dtype=np.int64)
    longest = int(lengths.max()) if len(values) else 0
    trailing = {v.shape[1:] for v in values if len(v)} or {()}
    if len(trailing) > 1:
        raise ValueError(f"{key!r}: values of shapes {sorted(trailing)} pad only along their first axis")
    dtype = np.result_type(*[v.dtype for v in values]) if values else np.float32
    out = np.full((len(values), longest, *trailing.pop()), pad_value, dtype=dtype)
    for i, value in enumerate(values):
        out[i, : len(value)] = value
    return out, lengths


def _arrays(values: Sequence[Any]) -> tuple[list[Any], bool]:
    """Torch tensors as numpy arrays, and whether they hold bfloat16 (then their bits, as int16:
    numpy has no bfloat16); other values as they are."""
    first = values[0]
    if type(first).__module__ != "torch" or not hasattr(first, "numpy"):
        return list(values), False
    import torch

    if first.dtype == torch.bfloat16:
        return [v.detach().cpu().contiguous().view(torch.int16).numpy() for v in values], True
    return [v.detach().cpu().numpy() for v in values], False


def _bfloat16_bits_of(value: float) -> int:
    import torch

    return int(torch.tensor(value, dtype=torch.bfloat16).view(torch.int16))


def _travelling(array: Any, bits: bool, key: str, source: str) -> np.ndarray | WireTensor:
    """`array` as it travels (`bits`: bfloat16's); TypeError naming `key` when it cannot."""
    if bits:
        return bfloat16_bits(array)
    if not isinstance(array, np.ndarray) or array.dtype.name not in WIRE_DTYPES:
        kind = array.dtype if isinstance(array, np.ndarray) else type(array).__name__
        raise TypeError(f"{source} {key!r} as {kind}, which cannot travel: numbers, arrays, tensors "
                        "(bool, int, float, bfloat16) or strings")
    return array


def to_wire(batch: Mapping[str, Any], name: str) -> Batch:
    """A user collate's output, checked: each value an array or tensor that can travel, or a list of
    strings; anything else is an error naming the function and the key."""
    if not isinstance(batch, Mapping):
        raise InvalidJobSpec(f"collate {name!r} returned {type(batch).__name__}, not a dict of arrays")
    out: Batch = {}
    for key, value in batch.items():
        if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
            out[key] = pack_strings(value)
            continue
        (array,), bits = _arrays([value])
        try:
            out[key] = _travelling(np.asarray(array), bits, key, f"collate {name!r} returned")
        except (TypeError, ValueError) as exc:
            raise InvalidJobSpec(str(exc) if "cannot travel" in str(exc) else
                                 f"collate {name!r} returned {key!r} that cannot travel: {exc}") from None
    return out


__all__ = ["PAD", "Batch", "Collation", "build_collation", "collate_samples", "pad", "to_wire"]
