"""bench.cache_fill prints what each epoch did to the prepared-sample cache, from the node's counters,
which are cumulative."""

from __future__ import annotations

from bench.cache_fill import HEADER, Epoch, epoch_rows
from shardstream.proto.v1 import loader_pb2 as pb


def test_each_row_is_what_its_epoch_added_to_the_counters() -> None:
    first = pb.NodeReads(prepared_misses=100, prepared_deferred=80, prepared_memory_bytes=20 << 20,
                         prepared_memory_bound=64 << 20)
    second = pb.NodeReads(prepared_memory_hits=20, prepared_misses=180, prepared_deferred=85,
                          prepared_memory_bytes=64 << 20, prepared_memory_bound=64 << 20,
                          prepared_disk_bytes=16 << 20)
    rows = epoch_rows([Epoch("fill", 0, 1234.4, 0.3333, first), Epoch("measured", 0, 2000.0, 0.25, second)])
    assert rows[0] == ["fill 0", "1,234", "0.333", "0", "0", "100", "80", "20 / 64", "0"]
    assert rows[1] == ["measured 0", "2,000", "0.250", "20", "0", "80", "5", "64 / 64", "16"]
    assert all(len(row) == len(HEADER) for row in rows)
