"""Decode actors on two simulated nodes of one Ray cluster (ray.cluster_utils.Cluster)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import grpc
import pytest
import ray
from ray.cluster_utils import Cluster

from shardstream.client import RemoteLoader, ServiceUnavailable
from shardstream.proto.v1 import loader_pb2 as pb
from shardstream.proto.v1 import loader_pb2_grpc as pb_grpc
from shardstream.service.config import ServiceConfig
from shardstream.service.control.server import create_server
from tests.cluster import add_decode_node, decode_cluster, new_cluster
from tests.datasets import oracle_batches, write_indexed


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with decode_cluster() as cluster:
        yield cluster


@pytest.mark.slow
def test_decode_actors_spread_over_decode_nodes(cluster: Cluster, tmp_path: object) -> None:
    service, port = create_server(ServiceConfig(port=0))  # decoders follow the 'decode' resource
    address = f"127.0.0.1:{port}"
    try:
        with grpc.insecure_channel(address) as channel:
            status = pb_grpc.LoaderStub(channel).GetStatus(pb.GetStatusRequest(), timeout=10)
        decode_nodes = {n.node_id for n in cluster.list_all_nodes()[1:]}
        assert status.decoders == 2
        assert {d.node_id for d in status.decoder_status} == decode_nodes
        data = f"{tmp_path}/data"
        write_indexed(data, [13, 4, 20])
        for rank in (0, 1):
            with RemoteLoader(address, dataset=data, batch_size=4, seed=2, world_size=2, rank=rank,
                              prefetch=6) as loader:
                loader.set_epoch(1)
                assert [b["idx"].tolist() for b in loader] == oracle_batches(37, 2, rank, 4, True, 2, False, 1)
    finally:
        service.stop(grace=1.0)


@pytest.mark.slow
def test_service_starts_before_decode_nodes_and_serves_once_they_join(tmp_path: object) -> None:
    """As on Kubernetes: the head comes up first, decode workers join later. A rank that starts
    before them waits for one (within reconnect_timeout), then gets its batches."""
    ray.shutdown()
    cluster = new_cluster()
    try:
        ray.init(address=cluster.address, logging_level="WARNING")
        service, port = create_server(ServiceConfig(port=0, decode_timeout_s=3))
        try:
            assert service.pool.size == 0
            data = f"{tmp_path}/data"
            write_indexed(data, [9])
            oracle = oracle_batches(9, 1, 0, 4, True, 0, False, 0)
            loader = RemoteLoader(f"127.0.0.1:{port}", dataset=data, batch_size=4, world_size=1, rank=0,
                                  reconnect_timeout=3)
            started = time.monotonic()
            with pytest.raises(ServiceUnavailable, match="lists no decoder"):
                next(iter(loader))  # waiting for a decoder is bounded: a typed error, not a hang
            assert time.monotonic() - started < 30
            waiting: list[list[list[int]]] = []  # a rank that starts before any decoder, and waits
            patient = RemoteLoader(f"127.0.0.1:{port}", dataset=data, batch_size=4, world_size=1, rank=0,
                                   job_name="patient")
            waiter = threading.Thread(target=lambda: waiting.append([b["idx"].tolist() for b in patient]))
            waiter.start()
            add_decode_node(cluster)
            waiter.join(timeout=120)  # the joining node's actor starts (seconds, on a busy machine)
            assert waiting == [oracle]
            # the failed attempt handed out no batch, so iterating again retries epoch 0
            assert [b["idx"].tolist() for b in loader] == oracle
            loader.close()
            patient.close()
        finally:
            service.stop(grace=1.0)
    finally:
        ray.shutdown()
        cluster.shutdown()
