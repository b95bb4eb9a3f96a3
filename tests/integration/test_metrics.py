"""Prometheus metrics over HTTP reflect what the service actually served."""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from shardstream.client import DatasetNotFound, RemoteLoader
from shardstream.service.control.server import Service
from tests.datasets import write_indexed
from tests.settle import settled


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_metrics_count_batches_bytes_lag_and_errors(service: tuple[Service, str], tmp_path: object) -> None:
    running, address = service
    assert running.metrics_port
    data = f"{tmp_path}/data"
    write_indexed(data, [10, 7])
    before = scrape(running.metrics_port)
    with RemoteLoader(address, dataset=data, batch_size=4, world_size=2, rank=0, job_name="metrics-job") as r0:
        batches = list(r0) + list(r0)  # rank 0 runs two epochs, rank 1 one: one epoch behind
    with RemoteLoader(address, dataset=data, batch_size=4, world_size=2, rank=1, job_name="metrics-job") as r1:
        per_epoch = len(list(r1))
    with pytest.raises(DatasetNotFound):
        RemoteLoader(address, dataset=f"{tmp_path}/missing", batch_size=4, world_size=1, rank=0)
    after = settled(lambda: scrape(running.metrics_port))  # the actors report each second
    job = (("job", "metrics-job"),)
    served = after[("shardstream_batches_served_total", job)]
    assert served == len(batches) + per_epoch
    assert after[("shardstream_bytes_served_total", job)] >= sum(
        t.numel() * t.element_size() for b in batches for t in b.values())
    assert after[("shardstream_rank_position_batches", (*job, ("rank", "0")))] == len(batches)
    assert after[("shardstream_rank_lag_batches", (*job, ("rank", "1")))] == per_epoch
    assert after[("shardstream_rank_lag_batches", (*job, ("rank", "0")))] == 0
    errors = (("code", "NOT_FOUND"),)
    assert after[("shardstream_errors_total", errors)] == before.get(("shardstream_errors_total", errors), 0) + 1
    assert after[("shardstream_decoders", ())] == 2
    assert after[("shardstream_decode_seconds_count", ())] >= served
