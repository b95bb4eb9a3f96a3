"""The decode nodes' local copy, through the real service: same bytes, storage read once, visible.

Two services of this module's own (one decode actor each): one keeps a local copy in a fresh
directory, the other has it off and reads every row group from storage as before.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shardstream.client import RemoteLoader
from shardstream.proto.v1 import loader_pb2 as pb
from shardstream.proto.v1 import loader_pb2_grpc as pb_grpc
from shardstream.service.config import ServiceConfig
from shardstream.service.control.server import Service, create_server
from tests.datasets import oracle_batches, write_images, write_indexed
from tests.integration.test_metrics import scrape
from tests.settle import settled
from tests.side_by_side import side_by_side

SHARDS = [30, 0, 21, 13]
N = sum(SHARDS)


def _start(local_ray: None, copy_dir: Path | None) -> tuple[Service, str]:
    config = ServiceConfig(port=0, num_decoders=1, decoder_cpus=0.5, metrics_port=0,
                           local_copy_dir=str(copy_dir or ""), local_copy_bytes=1 << 30 if copy_dir else 0)
    running, port = create_server(config)
    return running, f"127.0.0.1:{port}"


@pytest.fixture(scope="module")
def services(local_ray: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[tuple[Service, str]]]:
    """The service with a local copy and the one without, started side by side."""
    copy_dir = tmp_path_factory.mktemp("copy")
    with side_by_side(lambda: _start(local_ray, copy_dir), lambda: _start(local_ray, None)) as started:
        yield started


@pytest.fixture(scope="module")
def with_copy(services: list[tuple[Service, str]]) -> tuple[Service, str]:
    return services[0]


@pytest.fixture(scope="module")
def without_copy(services: list[tuple[Service, str]]) -> tuple[Service, str]:
    return services[1]


def _status(address: str) -> pb.ServiceStatus:
    import grpc

    with grpc.insecure_channel(address) as channel:
        return pb_grpc.LoaderStub(channel).GetStatus(pb.GetStatusRequest(), timeout=10)


def _node_reads(address: str) -> pb.NodeReads:
    """The node's read counters as the service has them now."""
    [reads] = _status(address).node_reads or [pb.NodeReads()]  # one node
    return reads


def _reads(address: str) -> pb.NodeReads:
    """The node's read counters, once its actors have reported everything they did so far."""
    return settled(lambda: _node_reads(address))


def _epoch(address: str, dataset: str, job: str, epoch: int, world_size: int = 2,
           **kwargs: object) -> list[dict[str, bytes]]:
    """Rank `world_size - 1`'s batches of `epoch`, as bytes per tensor."""
    with RemoteLoader(address, dataset=dataset, batch_size=5, shuffle=True, seed=11, world_size=world_size,
                      rank=world_size - 1, job_name=job, **kwargs) as loader:  # type: ignore[arg-type]
        loader.set_epoch(epoch)
        return [{name: t.numpy().tobytes() for name, t in batch.items()} for batch in loader]


def test_batches_are_the_same_bytes_with_the_copy_cold_warm_and_off(
        with_copy: tuple[Service, str], without_copy: tuple[Service, str], tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    write_indexed(data, SHARDS, row_group_size=4, features=8)
    cold = _epoch(with_copy[1], data, "same-bytes-cold", 3)
    warm = _epoch(with_copy[1], data, "same-bytes-warm", 3)
    off = _epoch(without_copy[1], data, "same-bytes-off", 3)
    assert cold == warm == off
    expected = oracle_batches(N, 2, 1, 5, True, 11, False, 3)
    assert [np.frombuffer(b["idx"], dtype=np.int64).tolist() for b in cold] == expected


def test_decoded_images_are_the_same_with_the_copy_and_without(
        with_copy: tuple[Service, str], without_copy: tuple[Service, str], tmp_path: Path) -> None:
    data = str(tmp_path / "images")
    write_images(data, [9, 7])
    args = {"transform": "image", "transform_args": {"size": 16}, "columns": ["image", "label", "idx"]}
    assert (_epoch(with_copy[1], data, "images-copy", 1, **args)
            == _epoch(without_copy[1], data, "images-off", 1, **args))


def test_storage_is_read_once_and_the_status_and_metrics_say_so(with_copy: tuple[Service, str],
                                                                tmp_path: Path) -> None:
    running, address = with_copy
    data = str(tmp_path / "counted")
    paths = write_indexed(data, SHARDS, row_group_size=4, features=8)
    row_groups = sum(pq.read_metadata(p).num_row_groups for p, rows in zip(paths, SHARDS, strict=True) if rows)
    before = _reads(address)
    _epoch(address, data, "counted", 0, world_size=1)  # every row, so every row group
    first = _reads(address)
    assert first.storage_row_groups_read - before.storage_row_groups_read == row_groups
    # Each column chunk once, and each footer once: Arrow reads a file's last 64 KiB for its footer,
    # all of these small files, so at most twice their size.
    files = sum(Path(p).stat().st_size for p in paths)
    assert 0 < first.storage_bytes_read - before.storage_bytes_read <= 2 * files
    assert first.disk_misses - before.disk_misses == row_groups
    assert first.disk_bytes > before.disk_bytes
    _epoch(address, data, "counted", 1, world_size=1)  # another order, every row group again: all from the copy
    assert running.metrics_port
    # the status and the metrics once the actors have reported, settled together
    second, metrics = settled(lambda: (_node_reads(address), scrape(running.metrics_port)))
    assert second.storage_bytes_read == first.storage_bytes_read
    assert second.memory_hits > first.memory_hits
    node = ("node", second.node_id)
    assert metrics[("shardstream_storage_bytes_read_total", (node,))] == second.storage_bytes_read
    assert metrics[("shardstream_cache_misses_total", (node, ("tier", "disk")))] == second.disk_misses
    assert metrics[("shardstream_cache_bytes", (node, ("tier", "disk")))] == second.disk_bytes


def test_a_rewritten_shard_is_read_again_not_served_from_the_copy(with_copy: tuple[Service, str],
                                                                 tmp_path: Path) -> None:
    address = with_copy[1]
    data = tmp_path / "rewritten"
    write_indexed(str(data), [12], row_group_size=4)
    first = _epoch(address, str(data), "before-rewrite", 0, columns=["y"])
    assert {v for b in first for v in np.frombuffer(b["y"], dtype=np.int32)} != {7}
    table = pq.read_table(data / "part-00000.parquet")
    before = (data / "part-00000.parquet").stat()
    pq.write_table(table.set_column(2, "y", pa.array(np.full(12, 7, dtype=np.int32))),
                   data / "part-00000.parquet", row_group_size=4)
    os.utime(data / "part-00000.parquet", ns=(before.st_atime_ns, before.st_mtime_ns + 10**9))  # whatever the clock's grain
    again = _epoch(address, str(data), "after-rewrite", 0, columns=["y"])
    assert {v for b in again for v in np.frombuffer(b["y"], dtype=np.int32)} == {7}


def _flip_a_value(path: Path) -> None:
    """Flip a bit of one row's `x` (8 float32s holding its index) in the file, in place."""
    data = path.read_bytes()
    at = next(data.index(p) for p in (np.full(8, k, np.float32).tobytes() for k in range(1, N)) if p in data)
    with open(path, "r+b") as f:  # the same file (inode), as the actor's mapping sees it
        f.seek(at + 2)
        f.write(bytes([data[at + 2] ^ 0x10]))


def test_a_damaged_row_group_in_the_copy_is_fetched_again_never_served(with_copy: tuple[Service, str],
                                                                       tmp_path: Path) -> None:
    """After a warm epoch every row group of the dataset in the copy is damaged in place (a bit
    flipped in its values, while the decode actor holds it mapped): the next epoch is still the
    oracle's, and each row group is one checksum fault, fetched again."""
    running, address = with_copy
    assert running.metrics_port
    data = str(tmp_path / "damaged")
    write_indexed(data, SHARDS, row_group_size=4, features=8)
    copy = Path(running.config.local_copy_dir)
    before = set(copy.glob("*/*.arrow"))
    _epoch(address, data, "damaged-copy", 0, world_size=1)  # every row group
    ours = sorted(set(copy.glob("*/*.arrow")) - before)
    assert ours
    reads, metrics = settled(lambda: (_node_reads(address), scrape(running.metrics_port)))
    node = ("node", reads.node_id)
    key = ("shardstream_cache_faults_total", (("cache", "local_copy"), ("cause", "checksum"), node))
    faults = metrics.get(key, 0)
    for path in ours:
        before = path.stat()
        _flip_a_value(path)
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 10**9))  # a later mtime whatever the clock's grain
    batches = _epoch(address, data, "damaged-copy", 1, world_size=1, reconnect_timeout=30)
    assert [np.frombuffer(b["idx"], dtype=np.int64).tolist() for b in batches] == oracle_batches(
        N, 1, 0, 5, True, 11, False, 1)
    for b in batches:  # x holds its row's index, `features` times
        idx = np.frombuffer(b["idx"], dtype=np.int64)
        np.testing.assert_array_equal(np.frombuffer(b["x"], dtype=np.float32).reshape(len(idx), 8),
                                      np.repeat(idx, 8).reshape(len(idx), 8).astype(np.float32))
    assert settled(lambda: scrape(running.metrics_port))[key] - faults == len(ours)
