"""Which rank am I, of how many: torch.distributed, else the environment, else 1 process."""

from __future__ import annotations

import os

import torch.distributed as dist

from shardstream.proto.errors import InvalidJobSpec


def resolve_rank_world(rank: int | None, world_size: int | None) -> tuple[int, int]:
    if rank is None or world_size is None:
        if dist.is_available() and dist.is_initialized():
            found = dist.get_rank(), dist.get_world_size()
        elif "RANK" in os.environ and "WORLD_SIZE" in os.environ:
            found = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        else:
            found = 0, 1
        rank = found[0] if rank is None else rank
        world_size = found[1] if world_size is None else world_size
    if world_size <= 0:
        raise InvalidJobSpec(f"world_size must be > 0, got {world_size}")
    if not 0 <= rank < world_size:
        raise InvalidJobSpec(f"rank {rank} is outside world_size {world_size} (0..{world_size - 1})")
    return rank, world_size


def default_job_name() -> str:
    """Ranks of one torchrun job agree on this without talking to each other."""
    explicit = os.environ.get("SHARDSTREAM_JOB_NAME")
    if explicit:
        return explicit
    run_id = os.environ.get("TORCHELASTIC_RUN_ID", "")
    return run_id if run_id not in ("", "none") else ""


__all__ = ["default_job_name", "resolve_rank_world"]
