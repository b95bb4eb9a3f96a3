"""The prepared-sample cache across decode nodes (node/prepared_peers.py), on two simulated nodes
of one Ray cluster, each with a disk tier of its own (its own TMPDIR).

From the second epoch on, a shuffled job finds every sample, in its node's tier or at its home
node, and prepares none again; each node keeps only the samples it is home to; and the batches
are the bytes a service with the cache off sends.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from shardstream.client import RemoteLoader
from shardstream.proto.v1 import loader_pb2 as pb
from shardstream.proto.v1 import loader_pb2_grpc as pb_grpc
from shardstream.service.config import ServiceConfig
from shardstream.service.control.server import Service, create_server
from shardstream.service.node.prepared_tier import SampleTier
from tests.cluster import decode_cluster
from tests.datasets import write_images
from tests.settle import settled

IMAGE = {"transform": "image", "transform_args": {"size": 16}}
N = 29  # samples: 3 shards of row groups of 8


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Path]]:
    """Two decode nodes; each one's TMPDIR, where its disk tier lives (the default directory)."""
    root = tmp_path_factory.mktemp("nodes")
    temps = [root / f"node{i}" for i in range(2)]
    for temp in temps:
        temp.mkdir()
    with decode_cluster([{"TMPDIR": str(temp)} for temp in temps]):
        yield temps


def _serve(cache: bool) -> tuple[Service, str]:
    running, port = create_server(ServiceConfig(port=0, decoder_cpus=0.5, local_copy_bytes=0, prepared_cache=cache,
                                                prepared_cache_memory_bytes=0, prepared_cache_disk_bytes=1 << 26,
                                                prepared_cache_write_share=1.0))  # (as tests/conftest.py's)
    return running, f"127.0.0.1:{port}"


def _epoch(address: str, dataset: str, job: str, epoch: int, seed: int = 5) -> list[dict[str, bytes]]:
    with RemoteLoader(address, dataset=dataset, batch_size=4, shuffle=True, seed=seed, world_size=1, rank=0,
                      job_name=job, **IMAGE) as loader:  # type: ignore[arg-type]
        loader.set_epoch(epoch)
        return [{name: t.numpy().tobytes() for name, t in batch.items()} for batch in loader]


def _reads(address: str) -> pb.NodeReads:
    """The read counters summed over the nodes, once the actors have reported what they did."""
    def read() -> pb.NodeReads:
        with grpc.insecure_channel(address) as channel:
            status = pb_grpc.LoaderStub(channel).GetStatus(pb.GetStatusRequest(), timeout=10)
        total = pb.NodeReads()
        for node in status.node_reads:
            for field in ("prepared_memory_hits", "prepared_disk_hits", "prepared_peer_hits", "prepared_misses"):
                setattr(total, field, getattr(total, field) + getattr(node, field))
        return total

    return settled(read)


def _held(temps: list[Path]) -> list[set[tuple[str, int]]]:
    """Each node's prepared samples on disk, as (shard folder, row)."""
    return [SampleTier("disk", str(t / "shardstream-local-copy" / "prepared-samples"), 0).held() for t in temps]


@pytest.mark.slow
def test_every_sample_is_prepared_once_in_the_cluster_and_kept_at_its_home(nodes: list[Path],
                                                                          tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    write_images(data, [13, 8, 8])
    running, address = _serve(cache=True)
    try:
        assert running.pool.size == 2
        cached = [_epoch(address, data, "peers", 0)]
        cold = _reads(address)  # a new service: its counters started at 0
        assert cold.prepared_misses == N and cold.prepared_peer_hits == 0  # each prepared once, where its batch was
        # Samples prepared away from their home reach it without being waited for: wait here.
        deadline = time.monotonic() + 30
        while sum(len(h) for h in _held(nodes)) < N and time.monotonic() < deadline:
            time.sleep(0.2)
        first, second = _held(nodes)
        assert len(first | second) == N and not first & second  # each sample kept once, at its home
        assert first and second
        for epoch in (1, 2):
            cached.append(_epoch(address, data, "peers", epoch))
        warm = _reads(address)
        assert warm.prepared_misses == cold.prepared_misses  # nothing prepared again
        assert warm.prepared_peer_hits - cold.prepared_peer_hits > 0  # ... some found at the other node
        assert (warm.prepared_disk_hits - cold.prepared_disk_hits
                + warm.prepared_peer_hits - cold.prepared_peer_hits) == 2 * N
        sweep = _epoch(address, data, "peers-sweep", 0, seed=8)  # another job starts warm too
        assert _reads(address).prepared_misses == cold.prepared_misses
    finally:
        running.stop(grace=1.0)

    running, address = _serve(cache=False)  # the same nodes, the cache off: the same bytes
    try:
        assert running.pool.size == 2
        assert [_epoch(address, data, "off", epoch) for epoch in (0, 1, 2)] == cached
        assert _epoch(address, data, "off-sweep", 0, seed=8) == sweep
    finally:
        running.stop(grace=1.0)
