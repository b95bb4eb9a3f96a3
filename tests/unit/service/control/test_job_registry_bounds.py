"""The job registry holds what clients ask it to within bounds: at most max_jobs jobs, nothing kept
per job name it was merely asked for, no rank a job does not have; and whatever opening a dataset
or building a transform raises reaches the client as a typed error."""

from __future__ import annotations

import time
from typing import Any

import pytest

from shardstream.proto.errors import InvalidJobSpec, TooManyJobs, UnreadableShard
from shardstream.proto.job_options import JobOptions
from shardstream.service.control.access import DatasetAccess
from shardstream.service.control.jobs import JobRegistry
from shardstream.service.node_messages import JobServed
from tests.datasets import write_indexed

HERE = __name__


def picky(**kwargs: Any) -> Any:
    """A user transform factory that refuses its arguments with its own error."""
    raise ValueError(f"picky takes no {sorted(kwargs)}")


def spec(data: str, **overrides: Any) -> JobOptions:
    values: dict[str, Any] = dict(dataset=(data,), batch_size=2, shuffle=True, seed=0, drop_last=False,
                                  world_size=2)
    values.update(overrides)
    return JobOptions(**values)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> str:
    directory = str(tmp_path_factory.mktemp("registry") / "data")
    write_indexed(directory, [5, 4])
    return directory


def test_past_max_jobs_a_new_job_is_refused_and_open_ones_still_join(data: str) -> None:
    registry = JobRegistry((), max_jobs=2)
    first = registry.open("a", spec(data), 0)
    registry.open("b", spec(data), 0)
    with pytest.raises(TooManyJobs, match="holds 2 jobs, its max_jobs setting"):
        registry.open("c", spec(data), 0)
    assert registry.open("a", spec(data), 1) is first  # joining takes no room


def test_no_lock_is_kept_per_job_name_tried(data: str) -> None:
    registry = JobRegistry(())
    registry.open("kept", spec(data), 0)
    for name in ("missing-1", "missing-2"):
        with pytest.raises(FileNotFoundError):
            registry.open(name, spec(f"{data}/nope"), 0)
    assert registry._opening == {}


def test_an_untyped_storage_error_is_unreadable_shard_naming_dataset_and_cause(data: str) -> None:
    """An operator who lets http through (dataset_protocols) gets the client library's own error
    (aiohttp's ClientConnectorError here) as UnreadableShard, not INTERNAL."""
    registry = JobRegistry((), DatasetAccess((), protocols=("file", "http")))
    url = "http://127.0.0.1:9/data/x.parquet"  # nothing listens on port 9
    with pytest.raises(UnreadableShard, match=r"could not open dataset \['http://127\.0\.0\.1:9/data/x\.parquet'\]: "
                                              r"\w*(Connect|OSError)\w*"):
        registry.open("web", spec(url), 0)


def test_a_transform_factorys_own_error_is_a_bad_spec(data: str) -> None:
    registry = JobRegistry((HERE,))
    with pytest.raises(InvalidJobSpec, match=r"transform '.*:picky' did not build .*ValueError: picky takes no"):
        registry.open("picky", spec(data, transform=f"{HERE}:picky", transform_args={"n": 1}), 0)


def test_stalls_of_ranks_outside_the_job_are_not_kept(data: str) -> None:
    registry = JobRegistry(())
    job = registry.open("stalls", spec(data), 0)
    now = time.time()
    registry.record_served(job.job_id, JobServed(stalls={1: (0.5, now), 2: (0.9, now), -1: (0.1, now),
                                                         2**31 - 1: (0.2, now)}))
    assert [(r.rank, r.data_stall) for r in job.ranks()] == [(1, 0.5)]



def test_every_job_tells_its_decoders_the_largest_batch_they_may_build(data: str) -> None:
    registry = JobRegistry((), max_batch_bytes=12_345)
    job = registry.open("sized", spec(data), 0)
    assert job.decode.max_batch_bytes == 12_345
