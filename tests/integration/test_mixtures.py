"""A mixture of datasets end to end: each rank gets the places its definition gives it (an oracle
written from docs/mixtures.md, split by torch's DistributedSampler), resumes mid-mixture at another
world size, refuses a changed mixture by name, and counts what it got of each source."""

from __future__ import annotations

import json
import os
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tokenizers import Tokenizer

from shardstream.client import (
    CheckpointMismatch,
    Mixture,
    RemoteLoader,
    ShardstreamError,
    Source,
)
from shardstream.client.status_text import status_text
from shardstream.proto.v1 import loader_pb2 as pb
from shardstream.proto.v1 import loader_pb2_grpc as pb_grpc
from shardstream.service.control.server import Service
from tests.mixture_oracle import oracle_rank_batches
from tests.text_datasets import TEXTS, bpe_tokenizer, save, write_texts

SIZES = (37, 20, 9)
TAG = 1000  # a sample's tag: source * TAG + its row in its source


def write_source(directory: str, source: int, rows: int, files: int = 2) -> str:
    os.makedirs(directory, exist_ok=True)
    per = -(-rows // files)
    for f in range(files):
        tags = [source * TAG + i for i in range(f * per, min(rows, (f + 1) * per))]
        tokens = [[t % 7] * (1 + t % 3) for t in tags]
        pq.write_table(pa.table({"tag": pa.array(tags, pa.int64()), "input_ids": pa.array(tokens, pa.list_(pa.int64()))}),
                       os.path.join(directory, f"part-{f}.parquet"), row_group_size=4)
    return directory


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    root = tmp_path_factory.mktemp("mixture")
    return [write_source(str(root / name), s, rows) for s, (name, rows) in enumerate(zip("abc", SIZES, strict=True))]


def mixture(sources: list[str], weights: tuple[float, ...] = (0.5, 0.3, 0.2),
            schedule: dict[int, dict[str, float]] | None = None) -> Mixture:
    return Mixture([Source(name, url, weight=w) for name, url, w in zip("abc", sources, weights, strict=True)],
                   schedule=schedule or {})


def loader(address: str, mix: Mixture, rank: int, world_size: int, batch_size: int, name: str,
           **options: Any) -> RemoteLoader:
    return RemoteLoader(address, mix, batch_size=batch_size, world_size=world_size, rank=rank, job_name=name,
                        seed=5, collate="pad", pad_value=-1, **options)


def tags(batch: dict[str, Any]) -> list[tuple[int, int]]:
    return [divmod(int(t), TAG) for t in batch["tag"].tolist()]


@pytest.mark.parametrize(("drop_last", "shuffle"), [(False, True), (True, False)])
def test_each_rank_gets_the_places_the_definition_gives_it(service_address: str, sources: list[str],
                                                           drop_last: bool, shuffle: bool) -> None:
    schedule = {2: {"a": 0.1, "b": 0.1, "c": 0.8}}
    phases = [(0, (0.5, 0.3, 0.2)), (2, (0.1, 0.1, 0.8))]
    for epoch in (0, 1):
        for rank in range(2):
            with loader(service_address, mixture(sources, schedule=schedule), rank, 2, 4, f"oracle-{drop_last}",
                        drop_last=drop_last, shuffle=shuffle) as ranked:
                ranked.set_epoch(epoch)
                got = [tags(batch) for batch in ranked]
            assert got == oracle_rank_batches(SIZES, phases, 5, epoch, 2, rank, 4, drop_last, shuffle)
            assert len(got) == len(ranked)


def test_stats_status_and_metrics_count_each_source(service: tuple[Service, str], sources: list[str]) -> None:
    running, service_address = service
    with loader(service_address, mixture(sources), 0, 1, 6, "counted") as one:
        delivered = [t for batch in one for t in tags(batch)]
        expected_tokens = {name: sum(1 + (s * TAG + i) % 3 for src, i in delivered if src == s)
                           for s, name in enumerate("abc")}
        assert one.stats.source_samples == {name: sum(1 for src, _ in delivered if src == s)
                                            for s, name in enumerate("abc")}
        assert one.stats.source_tokens == expected_tokens
        assert sum(one.stats.source_samples.values()) == sum(SIZES)
        job_id = one.job.job_id
    # the decoders report what they sent about once a second: until all of it is in (each step sent once)
    status = polled(lambda: job_status(service_address, job_id),
                    lambda job: sum(s.samples_served for s in job.sources) >= sum(SIZES))
    assert [(s.name, s.num_samples) for s in status.sources] == list(zip("abc", SIZES, strict=True))
    assert {s.name: s.samples_served for s in status.sources} == one.stats.source_samples
    assert {s.name: s.tokens_served for s in status.sources} == expected_tokens
    text = status_text(service_address, pb.ServiceStatus(jobs=[status]))
    assert f"source 'a': {SIZES[0]} samples; served {one.stats.source_samples['a']} samples" in text
    with urllib.request.urlopen(f"http://127.0.0.1:{running.metrics_port}/metrics", timeout=10) as response:
        metrics = response.read().decode()
    assert f'shardstream_source_tokens_served_total{{job="counted",source="c"}} {float(expected_tokens["c"])}' \
        in metrics


def job_status(address: str, job_id: str) -> pb.JobStatus:
    with grpc.insecure_channel(address) as channel:
        status = pb_grpc.LoaderStub(channel).GetStatus(pb.GetStatusRequest(), timeout=10)
    return next(job for job in status.jobs if job.job_id == job_id)


def polled(read: Callable[[], Any], done: Callable[[Any], bool], timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while not done(value := read()):
        assert time.monotonic() < deadline, f"not reported within {timeout_s} s: {value}"
        time.sleep(0.25)
    return value


def test_resume_mid_mixture_at_another_world_size(service_address: str, sources: list[str]) -> None:
    schedule = {3: {"a": 1.0, "b": 0.0, "c": 1.0}}
    with loader(service_address, mixture(sources, schedule=schedule), 0, 1, 8, "resume-1") as whole:
        whole.set_epoch(1)
        batches = iter(whole)
        for _ in range(2):
            next(batches)
        state = whole.state_dict()
        rest = [t for batch in batches for t in tags(batch)]
    resumed: list[list[tuple[int, int]]] = [[], []]
    for rank in range(2):
        with loader(service_address, mixture(sources, schedule=schedule), rank, 2, 4, "resume-2") as half:
            half.load_state_dict(state)
            resumed[rank] = [tags(batch) for batch in half]
    # global batch k of 8 is rank 0's and rank 1's batch k of 4, interleaved place by place
    merged = [t for b0, b1 in zip(resumed[0], resumed[1], strict=True) for pair in zip(b0, b1, strict=False)
              for t in pair]
    assert merged == rest


def test_a_changed_mixture_is_refused_naming_what_changed(service_address: str, sources: list[str]) -> None:
    with loader(service_address, mixture(sources), 0, 1, 8, "changed-1") as first:
        next(iter(first))
        state = first.state_dict()
    with loader(service_address, mixture(sources, weights=(0.5, 0.3, 0.4)), 0, 1, 8, "changed-2") as other, \
            pytest.raises(CheckpointMismatch, match=r"mixture weight of 'c' at step 0: 0.2 -> 0.4"):
        other.load_state_dict(state)


@pytest.mark.parametrize(("make", "match"), [
    (lambda s: Mixture([Source("a", s[0]), Source("a", s[1])]), "names .* must differ"),
    (lambda s: Mixture([Source("a", s[0]), Source("b", s[0])]), "is in mixture sources 'a' and 'b'"),
    (lambda s: Mixture([Source("a", s[0], weight=0), Source("b", s[1], weight=0)]), "all 0"),
    (lambda s: Mixture([Source("a", s[0]), Source("b", s[1] + "/nothing-here")]), "mixture source 'b'"),
    (lambda s: Mixture([Source("a", s[0])], schedule={4: {"z": 1.0}}), "source.*'z'"),
])
def test_bad_mixtures_are_refused_by_name(service_address: str, sources: list[str], make: Any, match: str) -> None:
    with pytest.raises(ShardstreamError, match=match):
        RemoteLoader(service_address, make(sources), batch_size=4, world_size=1, rank=0, job_name="bad-mixture")


def test_sources_of_other_formats_tokenized_on_the_service(service_address: str, tmp_path: Path) -> None:
    """A Parquet source and a JSON Lines source of text, tokenized by one tokenizer into one batch."""
    write_texts(str(tmp_path / "parquet"), TEXTS[:8], shards=1)
    os.makedirs(tmp_path / "jsonl")
    with open(tmp_path / "jsonl" / "part-0.jsonl", "w") as f:
        f.writelines(json.dumps({"text": text, "idx": 100 + i}) + "\n" for i, text in enumerate(TEXTS[8:]))
    path = save(bpe_tokenizer(), str(tmp_path / "tokenizer.json"))
    mix = Mixture([Source("prose", str(tmp_path / "parquet"), weight=1),
                   Source("lines", str(tmp_path / "jsonl"), format="jsonl", weight=1)])
    reference = Tokenizer.from_file(path)
    with RemoteLoader(service_address, mix, batch_size=4, world_size=1, rank=0, job_name="formats", collate="pad",
                      pad_value=-1, transform="tokenize", transform_args={"tokenizer": path, "keep": ["idx"]}) as it:
        seen = []
        for batch in it:
            for row, index in enumerate(batch["idx"].tolist()):
                text = TEXTS[index] if index < 100 else TEXTS[8 + index - 100]
                length = int(batch["input_ids_lengths"][row])
                assert batch["input_ids"][row, :length].tolist() == reference.encode(text, add_special_tokens=False).ids
                seen.append(index)
        assert it.stats.source_samples == {"prose": sum(i < 100 for i in seen), "lines": sum(i >= 100 for i in seen)}
    assert len(seen) == len(TEXTS) and 0 < sum(i >= 100 for i in seen)
