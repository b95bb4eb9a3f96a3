"""Batch messages -> dict[str, torch.Tensor]: no copy on CPU hosts, one into pinned memory with CUDA.

String fields (captions, paths) arrive as ``list[str]``, as DataLoader's
default collate gives them.

Without an accelerator a tensor is a view of the received message
(``torch.frombuffer``): the message was made for this batch alone and nothing
else references it, so the tensor may be written in place like any other.
Data that is not aligned for its dtype is copied, as is everything when a GPU
is present: then the one copy goes into page-locked memory, so
``.to(device, non_blocking=True)`` overlaps the host-to-device copy with
compute (the pattern of torch's DataLoader ``pin_memory``).
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

from shardstream.proto.wire import BatchView, TensorView
from shardstream.proto.wire_values import BFLOAT16, STRINGS

# The message bytes are read-only to Python, but this batch is their only user. Scoped to this
# module and installed once: ``catch_warnings`` would race with the training thread's filters.
warnings.filterwarnings("ignore", message="The given buffer is not writable", category=UserWarning,
                        module=__name__)

TORCH_DTYPES: dict[str, torch.dtype] = {
    "bool": torch.bool,
    "uint8": torch.uint8,
    "int8": torch.int8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "uint16": torch.uint16,  # torch's unsigned types beyond uint8 hold values; few ops take them
    "uint32": torch.uint32,
    "uint64": torch.uint64,
    "float16": torch.float16,
    "float32": torch.float32,
    "float64": torch.float64,
    BFLOAT16: torch.bfloat16,
}

Batch = dict[str, "torch.Tensor | list[str]"]


def batch_to_tensors(batch: BatchView, pin: bool) -> Batch:
    """Pinned copies from torch's caching host allocator (which hands freed pinned blocks
    out again, so steady-state batches reuse pinned buffers) when `pin`, else views."""
    return {view.name: view.strings() if view.dtype == STRINGS else _pinned_copy(view) if pin else _view(view)
            for view in batch.tensors}


def _view(view: TensorView) -> torch.Tensor:
    source = view.array()  # checks dtype and size against the shape
    dtype = TORCH_DTYPES[view.dtype]
    if not source.flags.aligned or source.size == 0:
        return torch.from_numpy(source.copy()).view(dtype)
    flat = torch.frombuffer(view.data, dtype=dtype)
    return flat.view(view.shape)


def _pinned_copy(view: TensorView) -> torch.Tensor:
    source = view.array()
    tensor = _pinned_empty(source.shape, TORCH_DTYPES[view.dtype])
    bits = tensor.view(torch.int16) if view.dtype == BFLOAT16 else tensor  # numpy has no bfloat16
    np.copyto(bits.numpy(), source.view(np.int16) if view.dtype == BFLOAT16 else source)
    return tensor


def _pinned_empty(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """Page-locked memory for one tensor (raises without an accelerator): the one place the
    client pins, so a test can stand in for it on a host without one."""
    return torch.empty(shape, dtype=dtype, pin_memory=True)


def batch_nbytes(batch: Batch) -> int:
    """The bytes a batch holds: its tensors', and its strings' UTF-8 (about)."""
    return sum(value.numel() * value.element_size() if isinstance(value, torch.Tensor) else sum(map(len, value))
               for value in batch.values())


def pin_available() -> bool:
    """Pinning needs an accelerator; without one `pin_memory()` raises."""
    return torch.cuda.is_available()


__all__ = ["TORCH_DTYPES", "Batch", "batch_nbytes", "batch_to_tensors", "pin_available"]
