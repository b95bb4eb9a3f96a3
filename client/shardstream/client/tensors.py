"""Batch messages -> dict[str, torch.Tensor]: no copy on CPU hosts, one into pinned memory with CUDA.

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
    "float16": torch.float16,
    "float32": torch.float32,
    "float64": torch.float64,
}


def batch_to_tensors(batch: BatchView, pin: bool) -> dict[str, torch.Tensor]:
    """Pinned copies from torch's caching host allocator (which hands freed pinned blocks
    out again, so steady-state batches reuse pinned buffers) when `pin`, else views."""
    return {view.name: _pinned_copy(view) if pin else _view(view) for view in batch.tensors}


def _view(view: TensorView) -> torch.Tensor:
    source = view.array()  # checks dtype and size against the shape
    if not source.flags.aligned or source.size == 0:
        return torch.from_numpy(source.copy())
    flat = torch.frombuffer(view.data, dtype=TORCH_DTYPES[view.dtype])
    return flat.view(view.shape)


def _pinned_copy(view: TensorView) -> torch.Tensor:
    source = view.array()
    tensor = torch.empty(source.shape, dtype=TORCH_DTYPES[view.dtype], pin_memory=True)
    np.copyto(tensor.numpy(), source)
    return tensor


def pin_available() -> bool:
    """Pinning needs an accelerator; without one `pin_memory()` raises."""
    return torch.cuda.is_available()


__all__ = ["TORCH_DTYPES", "batch_to_tensors", "pin_available"]
