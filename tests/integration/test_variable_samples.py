"""Variable-length lists, strings, float16/bfloat16 and user collates, end to end through a real service."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from shardstream.client import InvalidJobSpec, RemoteLoader
from tests.datasets import oracle_batches
from tests.stateful import END, check_resumes, loader_passes

N = 30


@pytest.fixture(scope="module")
def documents(tmp_path_factory: pytest.TempPathFactory) -> str:
    """`idx`; `ids`: 1 + idx % 7 token ids starting at idx; `caption`; `half`: idx as float16."""
    directory = tmp_path_factory.mktemp("documents")
    for part, rows in enumerate([range(0, 13), range(13, N)]):
        pq.write_table(pa.table({
            "idx": pa.array(list(rows), pa.int64()),
            "ids": pa.array([list(range(i, i + 1 + i % 7)) for i in rows], pa.list_(pa.int32())),
            "caption": [f"document {i}" for i in rows],
            "half": pa.array(np.array(list(rows), dtype=np.float16)),
        }), directory / f"part-{part}.parquet", row_group_size=5)
    return str(directory)


def loader(address: str, dataset: str, **kwargs: object) -> RemoteLoader:
    return RemoteLoader(address, dataset=dataset, **{"batch_size": 4, "world_size": 2, "rank": 1, "seed": 2,
                                                     **kwargs})  # type: ignore[arg-type]


def test_list_columns_pad_strings_arrive_as_str_and_float16_keeps_its_dtype(service_address: str,
                                                                           documents: str) -> None:
    with loader(service_address, documents, collate="pad", pad_value=-1) as it:
        batches = list(it)
    assert [b["idx"].tolist() for b in batches] == oracle_batches(N, 2, 1, 4, True, 2, False, 0)
    for batch in batches:
        idx = batch["idx"].tolist()
        lengths = [1 + i % 7 for i in idx]
        assert batch["ids_lengths"].tolist() == lengths
        assert batch["ids"].shape == (len(idx), max(lengths)) and batch["ids"].dtype == torch.int32
        for row, i in zip(batch["ids"].tolist(), idx, strict=True):
            assert row == list(range(i, i + 1 + i % 7)) + [-1] * (max(lengths) - 1 - i % 7)
        assert batch["caption"] == [f"document {i}" for i in idx]
        assert batch["half"].dtype == torch.float16 and batch["half"].tolist() == idx
    assert list(batches[0]) == ["idx", "ids", "ids_lengths", "caption", "half"]


def test_a_list_column_without_pad_is_refused_at_open(service_address: str, documents: str) -> None:
    with pytest.raises(InvalidJobSpec, match=r"column 'ids' holds lists of varying length.*collate='pad'"):
        loader(service_address, documents)
    with loader(service_address, documents, columns=["idx"], bucket_by="ids") as it:  # lengths only, not batched
        assert list(next(iter(it))) == ["idx"]
    with loader(service_address, documents, columns=["idx", "caption"]) as it:  # strings need no pad
        assert next(iter(it))["caption"][0].startswith("document ")


def test_a_transforms_variable_values_strings_and_bfloat16(service_address: str, documents: str) -> None:
    with loader(service_address, documents, transform="tests.transforms:tokenize", collate="pad",
                columns=["idx"]) as it:
        it.set_epoch(3)
        batches = list(it)
    order = oracle_batches(N, 2, 1, 4, True, 2, False, 3)
    for batch, idx in zip(batches, order, strict=True):
        assert batch["ids_lengths"].tolist() == [1 + i % 5 for i in idx]
        assert batch["ids"][:, 0].tolist() == idx
        assert batch["caption"] == [f"sample {i}" for i in idx]
        assert batch["score"].dtype == torch.bfloat16
        assert batch["score"][:, 0].tolist() == torch.tensor([i / 4 for i in idx], dtype=torch.bfloat16).tolist()


def test_a_user_collate_and_one_that_returns_what_cannot_travel(service_address: str, documents: str) -> None:
    with loader(service_address, documents, collate="tests.transforms:sum_collate", columns=["idx"]) as it:
        batches = list(it)
    order = oracle_batches(N, 2, 1, 4, True, 2, False, 0)
    assert [b["idx_sum"].tolist() for b in batches] == [[sum(i)] for i in order]
    assert [b["names"] for b in batches] == [[f"#{i}" for i in idx] for idx in order]
    with pytest.raises(InvalidJobSpec, match=r"collate 'tests\.transforms:bad_collate' returned 'rows'.*cannot travel"):
        with loader(service_address, documents, collate="tests.transforms:bad_collate", columns=["idx"]) as it:
            next(iter(it))
    with loader(service_address, documents, columns=["idx"]) as it:  # the service serves on
        assert [b["idx"].tolist() for b in it] == order


@pytest.mark.parametrize("drop_last", [False, True])
def test_bucketing_keeps_each_ranks_samples_and_groups_similar_lengths(service_address: str, documents: str,
                                                                      drop_last: bool) -> None:
    def epoch(bucket_by: str | None, rank: int) -> list[list[int]]:
        with loader(service_address, documents, collate="pad", columns=["idx", "ids"], rank=rank,
                    drop_last=drop_last, bucket_by=bucket_by, bucket_window=2) as it:
            it.set_epoch(5)
            batches = list(it)
        for batch in batches:  # the lengths padding reports are the samples' own
            assert batch["ids_lengths"].tolist() == [1 + i % 7 for i in batch["idx"].tolist()]
        return [b["idx"].tolist() for b in batches]

    for rank in (0, 1):
        expected = oracle_batches(N, 2, rank, 4, True, 2, drop_last, 5)
        bucketed = epoch("ids", rank)
        assert len(bucketed) == len(expected)
        assert sorted(i for b in bucketed for i in b) == sorted(i for b in expected for i in b)
        assert bucketed == epoch("ids", rank)  # deterministic
        spread = sum(max(1 + i % 7 for i in b) - min(1 + i % 7 for i in b) for b in bucketed)
        assert spread < sum(max(1 + i % 7 for i in b) - min(1 + i % 7 for i in b) for b in expected)


def test_bucketing_resumes_at_any_point(service_address: str, documents: str) -> None:
    """Fresh, mid-epoch, at the end of epoch 5 and into epoch 6 (tests/stateful.py). Bucketing has no
    oracle of its own here: each pass must hold DistributedSampler's samples of its epoch."""
    def started_at_epoch_5() -> RemoteLoader:
        it = loader(service_address, documents, collate="pad", columns=["idx", "ids"], bucket_by="ids",
                    bucket_window=2, job_name="bucketed-resume")
        it.set_epoch(5)
        return it

    per_pass = len(oracle_batches(N, 2, 1, 4, True, 2, False, 5)) + 1
    resumes = check_resumes(started_at_epoch_5, lambda it: loader_passes(it, lambda b: b["idx"].tolist()),
                            2 * per_pass, points=[0, 2, per_pass, per_pass + 1])
    for epoch in (5, 6):
        got = sorted(i for e, batch in resumes.reference if e == epoch for i in batch)
        assert got == sorted(i for b in oracle_batches(N, 2, 1, 4, True, 2, False, epoch) for i in b)
    assert [item for item in resumes.reference if item[0] == END] == [(END, 5), (END, 6)]
