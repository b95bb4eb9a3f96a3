"""A packed batch's document boundaries as variable-length attention takes them.

A token dataset read with ``format_args={"eos_id": ...}`` gives each window its documents'
starts (``cu_seqlens`` [B, L + 1], padded with L) and count (``num_documents`` [B]); attention
that keeps documents apart (FlashAttention's ``flash_attn_varlen_func``, PyTorch's nested or
jagged tensors) wants them for the flattened batch of B * L tokens: ``varlen_boundaries``.
"""

from __future__ import annotations

import torch


def varlen_boundaries(cu_seqlens: torch.Tensor, num_documents: torch.Tensor) -> tuple[torch.Tensor, int]:
    """(cu_seqlens of the flattened batch, int32 [documents + 1], and the longest document's
    length) from a batch's per-window ``cu_seqlens`` [B, L + 1] and ``num_documents`` [B]."""
    rows, width = cu_seqlens.shape
    length = width - 1
    offsets = torch.arange(rows, dtype=torch.int64, device=cu_seqlens.device)[:, None] * length
    starts = cu_seqlens.to(torch.int64) + offsets
    taken = torch.arange(width, device=cu_seqlens.device)[None, :] < num_documents.to(cu_seqlens.device)[:, None]
    end = torch.tensor([rows * length], dtype=torch.int64, device=cu_seqlens.device)
    flat = torch.cat([starts[taken], end]).to(torch.int32)
    longest = int((flat[1:] - flat[:-1]).max()) if len(flat) > 1 else 0
    return flat, longest


__all__ = ["varlen_boundaries"]
