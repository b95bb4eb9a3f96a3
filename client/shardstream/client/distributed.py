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


def default_job_name(loader_ordinal: int, world_size: int) -> str:
    """The job a loader joins when it names none; its ranks agree on it without talking.

    The run (SHARDSTREAM_JOB_NAME, else torchrun's run id), which of the process's loaders this
    is (every rank creates its train and validation loaders in the same order), and the world
    size: two loaders of one script are two jobs, the same loader on every rank is one, and a
    restart of the run at another world size is a new job that `load_state_dict` resumes. With
    no run at all, "": the service names the job after its spec.
    """
    run = os.environ.get("SHARDSTREAM_JOB_NAME") or os.environ.get("TORCHELASTIC_RUN_ID", "")
    if run in ("", "none"):
        return ""
    return f"{run}/loader-{loader_ordinal}/world-{world_size}"


__all__ = ["default_job_name", "resolve_rank_world"]
