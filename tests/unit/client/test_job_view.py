"""JobView: the job as a rank knows it, one immutable snapshot of what OpenJob answered and what
ListDecoders last listed."""

from __future__ import annotations

import dataclasses

import pytest

from shardstream.client.job_view import JobView
from shardstream.proto.errors import DatasetChanged
from shardstream.proto.v1 import loader_pb2 as pb

OPENED = pb.OpenJobResponse(job_id="j1", spec_fingerprint="s", dataset_fingerprint="d", num_samples=12,
                            samples_per_rank=6, batches_per_rank=3, num_files=2)


def test_a_view_joins_the_open_answer_and_a_listing() -> None:
    job = JobView.of(OPENED, pb.ListDecodersResponse(batch_servers=["a:1", "b:2"], max_window_bytes=64))
    assert (job.job_id, job.num_samples, job.batches_per_rank, job.num_files) == ("j1", 12, 3, 2)
    assert job.batch_servers == ("a:1", "b:2") and job.max_window_bytes == 64


def test_a_new_listing_is_a_new_snapshot_and_the_old_one_is_untouched() -> None:
    first = JobView.of(OPENED, pb.ListDecodersResponse(batch_servers=["a:1"]))
    second = first.listed(pb.ListDecodersResponse(batch_servers=["a:1", "c:3"], max_window_bytes=8))
    assert first.batch_servers == ("a:1",) and first.max_window_bytes == 0
    assert second.batch_servers == ("a:1", "c:3") and second.max_window_bytes == 8
    assert dataclasses.replace(second, batch_servers=first.batch_servers, max_window_bytes=0) == first
    with pytest.raises(dataclasses.FrozenInstanceError):
        second.batch_servers = ()  # type: ignore[misc]


def test_a_job_opened_again_must_be_the_same_job() -> None:
    known = JobView.of(OPENED, pb.ListDecodersResponse())
    known.check_same(known.listed(pb.ListDecodersResponse(batch_servers=["z:9"])))  # other decoders: the same job
    reopened = pb.OpenJobResponse()
    reopened.CopyFrom(OPENED)
    reopened.num_samples = 13  # the dataset grew under the running job
    with pytest.raises(DatasetChanged, match="the job's num_samples is 13 instead of 12"):
        known.check_same(JobView.of(reopened, pb.ListDecodersResponse()))


def test_a_job_id_derived_anew_by_an_upgraded_service_is_the_same_job() -> None:
    known = JobView.of(OPENED, pb.ListDecodersResponse())
    renamed = pb.OpenJobResponse()
    renamed.CopyFrom(OPENED)
    renamed.job_id = "j2"  # the same name and spec, under a service that names jobs another way
    known.check_same(JobView.of(renamed, pb.ListDecodersResponse()))
