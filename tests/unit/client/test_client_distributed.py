"""Rank and world size: explicit, else torch.distributed, else RANK/WORLD_SIZE, else one process."""

from __future__ import annotations

import pytest

from shardstream.client.distributed import default_job_name, resolve_rank_world
from shardstream.proto.errors import InvalidJobSpec


def test_single_process_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert resolve_rank_world(None, None) == (0, 1)


def test_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert resolve_rank_world(None, None) == (3, 4)
    assert resolve_rank_world(1, None) == (1, 4)  # explicit wins, field by field


@pytest.mark.parametrize(("rank", "world"), [(2, 2), (-1, 2), (0, 0)])
def test_out_of_range(rank: int, world: int) -> None:
    with pytest.raises(InvalidJobSpec):
        resolve_rank_world(rank, world)


def test_job_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SHARDSTREAM_JOB_NAME", raising=False)
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")  # torchrun's value without rendezvous id
    assert default_job_name(0, 2) == ""
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "run-7")
    assert default_job_name(0, 2) == "run-7/loader-0/world-2"
    assert default_job_name(1, 2) == "run-7/loader-1/world-2"  # a second loader: another job
    assert default_job_name(0, 4) == "run-7/loader-0/world-4"  # restarted at another world size
    monkeypatch.setenv("SHARDSTREAM_JOB_NAME", "explicit")
    assert default_job_name(0, 2) == "explicit/loader-0/world-2"
