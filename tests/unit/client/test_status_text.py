"""`shardstream status` as text: each job's ranks in a table (position, batches/s, data stall, lag),
and a watched screen redrawn in place."""

from __future__ import annotations

from shardstream.client.status_text import repainted, status_text
from shardstream.proto.v1 import loader_pb2 as pb


def _status() -> pb.ServiceStatus:
    job = pb.JobStatus(job_id="0123456789abcdef", job_name="train", num_samples=1000, world_size=3,
                       batches_per_rank=40, ranks=[
                           pb.RankStatus(rank=0, epoch=1, step=12, position_batches=53, lag_batches=0,
                                         batches_per_second=8.3, data_stall=0.042),
                           pb.RankStatus(rank=1, epoch=1, step=9, position_batches=50, lag_batches=3,
                                         batches_per_second=2.0, data_stall=0.9134),
                           pb.RankStatus(rank=2, data_stall=0.5),  # heard from, nothing sent yet
                       ])
    quiet = pb.JobStatus(job_id="fedcba9876543210", job_name="eval", ranks=[
        pb.RankStatus(rank=0, epoch=0, step=3, position_batches=4)])  # an older client: no stall sent
    return pb.ServiceStatus(protocol_version=2, decoders=2, jobs=[job, quiet])


def test_each_job_lists_its_ranks_under_its_worst_stall() -> None:
    lines = status_text("host:1", _status()).splitlines()
    start = next(i for i, line in enumerate(lines) if "'train'" in line)
    assert lines[start + 1].split() == ["data", "stall:", "worst", "91.3%", "(rank", "1),", "mean", "48.5%",
                                        "over", "3", "rank(s)"]
    assert lines[start + 2].split() == ["rank", "epoch/step", "batches/s", "stall", "lag"]
    assert [line.split() for line in lines[start + 3:start + 6]] == [
        ["0", "1/12", "8.3", "4.2%", "0"],
        ["1", "1/9", "2.0", "91.3%", "3"],
        ["2", "-", "0.0", "50.0%", "0"],
    ]
    # columns line up under their headers
    assert len({len(line) for line in lines[start + 2:start + 6]}) == 1
    eval_at = next(i for i, line in enumerate(lines) if "'eval'" in line)
    assert "data stall" not in lines[eval_at + 1]
    assert lines[eval_at + 2].split() == ["0", "0/3", "0.0", "-", "0"]


def test_a_job_without_ranks_has_no_table() -> None:
    status = pb.ServiceStatus(jobs=[pb.JobStatus(job_id="a", job_name="new")])
    assert status_text("host:1", status).splitlines()[-1].startswith("  job a 'new'")


def test_a_watched_screen_is_cleared_once_then_redrawn_in_place() -> None:
    assert repainted("a\nb\n", first=True) == "\x1b[H\x1b[2Ja\x1b[K\nb\x1b[K\n\x1b[J"
    assert repainted("a\nb\n", first=False) == "\x1b[Ha\x1b[K\nb\x1b[K\n\x1b[J"


def test_the_scaling_policy_says_what_it_decided_and_why() -> None:
    status = _status()
    assert "decode scaling" not in status_text("host:1", status)  # off: nothing to say
    status.scaling.CopyFrom(pb.DecodeScalingStatus(
        enabled=True, min_decoders=1, max_decoders=8, wanted=5, ready=4, draining=1, busy_ratio=0.812,
        decision="hold", reason="waiting for the pool to settle", last_change="job train waits 74% of its time",
        last_change_seconds_ago=42.4, decisions_up=2, decisions_down=1))
    lines = status_text("host:1", status).splitlines()
    at = next(i for i, line in enumerate(lines) if "decode scaling" in line)
    assert lines[at].strip() == ("decode scaling (1-8): wants 5, 4 ready, 1 draining; decoders busy 81%; "
                                 "2 up, 1 down so far")
    assert lines[at + 1].strip() == "now: hold: waiting for the pool to settle"
    assert lines[at + 2].strip() == "last change, 42 s ago: job train waits 74% of its time"


def test_each_node_says_how_big_its_prepared_cache_tiers_are_and_why() -> None:
    status = _status()
    status.node_reads.append(pb.NodeReads(
        node_id="abcdef0123456789", prepared_memory_bound=2_400_000_000, prepared_memory_sizing="auto: half the room",
        prepared_disk_bound=0, prepared_disk_sizing="off: set to 0"))
    lines = status_text("host:1", status).splitlines()
    at = next(i for i, line in enumerate(lines) if "node abcdef012345" in line)
    assert lines[at + 2].strip() == "prepared-sample cache, memory tier: 2.40 GB (auto: half the room)"
    assert lines[at + 3].strip() == "prepared-sample cache, disk tier: off: set to 0"
