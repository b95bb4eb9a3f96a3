"""state_dict / load_state_dict: resume fresh, mid-epoch, at an epoch's end (tests/stateful.py, the
harness every stateful iterator's resume test uses), on another rank, in another process, and on
another world size with the same global batch."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys

import pytest

from shardstream.client import CheckpointMismatch, RemoteLoader
from tests.datasets import oracle_batches, write_indexed
from tests.stateful import END, check_resumes, loader_passes

N = 96
SPEC = {"shuffle": True, "seed": 5, "drop_last": False, "job_name": "resume"}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> str:
    directory = str(tmp_path_factory.mktemp("resume"))
    write_indexed(directory, [30, 66])
    return directory


def loader(address: str, dataset: str, world: int, rank: int, batch: int, **extra: object) -> RemoteLoader:
    options = {**SPEC, **extra}
    return RemoteLoader(address, dataset=dataset, batch_size=batch, world_size=world, rank=rank,
                        **options)  # type: ignore[arg-type]


def take(it, count: int) -> list[list[int]]:  # type: ignore[no-untyped-def]
    return [next(it)["idx"].tolist() for _ in range(count)]


def passes(rank: int, epochs: range) -> list[tuple[object, object]]:
    """What loader_passes gives for `epochs` of DistributedSampler's batches (world 2, batch 4)."""
    return [item for epoch in epochs
            for item in [*((epoch, b) for b in oracle_batches(N, 2, rank, 4, True, 5, False, epoch)), (END, epoch)]]


def idx(batch: dict[str, object]) -> list[int]:
    return batch["idx"].tolist()  # type: ignore[attr-defined,no-any-return]


def test_mid_epoch_resume_continues_exactly(service_address: str, dataset: str) -> None:
    """Saved fresh, 5 batches in, at the end of epoch 2 and 6 batches into epoch 3 (12 batches an
    epoch; each pass's end is an item too): each resumes exactly where the first run went on."""
    def started_at_epoch_2() -> RemoteLoader:
        it = loader(service_address, dataset, 2, 0, 4)
        it.set_epoch(2)
        return it

    expected = passes(0, range(2, 4))
    resumes = check_resumes(started_at_epoch_2, lambda it: loader_passes(it, idx), len(expected),
                            points=[0, 5, 13, 19], expected=expected)
    state = resumes.states[5]
    assert len(pickle.dumps(state)) < 1536  # small: the manifest names each shard with its identity
    with loader(service_address, dataset, 2, 0, 4) as resumed:
        resumed.load_state_dict(state)
        resumed.set_epoch(2)  # the usual training loop calls it again; it must not restart the epoch
        after = [b["idx"].tolist() for b in resumed]
        assert resumed.epoch == 2
        following = [b["idx"].tolist() for b in resumed]
        assert resumed.epoch == 3
    before = [batch for _, batch in resumes.reference[:5]]
    assert before + after == oracle_batches(N, 2, 0, 4, True, 5, False, 2)
    assert following == oracle_batches(N, 2, 0, 4, True, 5, False, 3)


def test_state_at_the_end_of_an_epoch_rolls_over_exactly_once(service_address: str, dataset: str) -> None:
    """A state taken once a pass over epoch 6 (or 7) has ended resumes with the next epoch, whole."""
    def started_at_epoch_6() -> RemoteLoader:
        it = loader(service_address, dataset, 2, 1, 4)
        it.set_epoch(6)
        return it

    expected = passes(1, range(6, 9))
    per_pass = len(oracle_batches(N, 2, 1, 4, True, 5, False, 6)) + 1
    check_resumes(started_at_epoch_6, lambda it: loader_passes(it, idx), len(expected),
                  points=[per_pass, 2 * per_pass], expected=expected)


def test_state_is_rank_agnostic(service_address: str, dataset: str) -> None:
    with loader(service_address, dataset, 2, 0, 4) as rank0:
        rank0.set_epoch(1)
        take(iter(rank0), 3)
        state = rank0.state_dict()
    with loader(service_address, dataset, 2, 1, 4) as rank1:
        rank1.load_state_dict(state)
        assert [b["idx"].tolist() for b in rank1] == oracle_batches(N, 2, 1, 4, True, 5, False, 1)[3:]


def test_resume_in_a_new_process(service_address: str, dataset: str, tmp_path: object) -> None:
    with loader(service_address, dataset, 2, 1, 4) as first:
        first.set_epoch(3)
        take(iter(first), 7)
        state_path = f"{tmp_path}/state.pkl"
        with open(state_path, "wb") as f:
            pickle.dump(first.state_dict(), f)
    script = (
        "import json, pickle, sys\n"
        "from shardstream.client import RemoteLoader\n"
        "address, dataset, state_path = sys.argv[1:4]\n"
        "l = RemoteLoader(address, dataset=dataset, batch_size=4, world_size=2, rank=1, shuffle=True, seed=5,\n"
        "                 drop_last=False, job_name='resume')\n"
        "l.load_state_dict(pickle.load(open(state_path, 'rb')))\n"
        "print(json.dumps([b['idx'].tolist() for b in l]))\n"
    )
    result = subprocess.run([sys.executable, "-c", script, service_address, dataset, state_path],
                            capture_output=True, text=True, timeout=120, env={**os.environ})
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout) == oracle_batches(N, 2, 1, 4, True, 5, False, 3)[7:]


@pytest.mark.parametrize(("world", "batch"), [(4, 2), (1, 8), (8, 1)])
def test_elastic_resume_keeps_the_global_batches(service_address: str, dataset: str, world: int,
                                                 batch: int) -> None:
    """Saved at world 2 x batch 4; resumed at another world size with the same global batch of 8."""
    with loader(service_address, dataset, 2, 0, 4, job_name="elastic-w2") as first:
        first.set_epoch(4)
        take(iter(first), 3)
        state = first.state_dict()
    per_rank = []
    for rank in range(world):
        with loader(service_address, dataset, world, rank, batch, job_name=f"elastic-w{world}") as resumed:
            resumed.load_state_dict(state)
            per_rank.append([b["idx"].tolist() for b in resumed])
    uninterrupted = [oracle_batches(N, 2, r, 4, True, 5, False, 4) for r in range(2)]
    expected = [sorted(uninterrupted[0][k] + uninterrupted[1][k]) for k in range(3, len(uninterrupted[0]))]
    got = [sorted(i for r in range(world) for i in per_rank[r][k]) for k in range(len(per_rank[0]))]
    assert got == expected


def test_refusals_name_the_cause(service_address: str, dataset: str) -> None:
    with loader(service_address, dataset, 2, 0, 4) as first:
        take(iter(first), 1)
        state = first.state_dict()
    with loader(service_address, dataset, 3, 0, 4, job_name="other-w") as other, \
            pytest.raises(CheckpointMismatch, match=r"global batch of 8 samples.*3 x batch_size 4 = 12"):
        other.load_state_dict(state)
    with loader(service_address, dataset, 2, 0, 4, seed=6, job_name="other-seed") as other, \
            pytest.raises(CheckpointMismatch, match="changed since it was taken: order seed: 5 -> 6"):
        other.load_state_dict(state)
    without_manifest = {k: v for k, v in state.items() if k != "manifest"}  # a checkpoint of an earlier version
    with loader(service_address, dataset, 2, 0, 4, seed=6, job_name="other-seed") as other, \
            pytest.raises(CheckpointMismatch, match="different job spec"):
        other.load_state_dict(without_manifest)
    with loader(service_address, dataset, 2, 0, 4) as same, pytest.raises(CheckpointMismatch, match="version"):
        same.load_state_dict({"epoch": 1})
    with loader(service_address, dataset, 2, 0, 4) as same, pytest.raises(CheckpointMismatch, match="dataset changed"):
        same.load_state_dict({**state, "dataset_fingerprint": "0" * 16})


def test_the_manifest_names_the_dataset_pipeline_and_order(service_address: str, dataset: str) -> None:
    with loader(service_address, dataset, 2, 0, 4, columns=["idx"], job_name="manifest") as it:
        manifest = it.manifest()
        assert it.state_dict()["manifest"] == manifest
    assert manifest["dataset"]["format"] == "parquet" and manifest["dataset"]["samples"] == N
    assert [s["samples"] for s in manifest["dataset"]["shards"]] == [30, 66]
    assert all(s["size"] > 0 and s["version"].startswith("mtime=") for s in manifest["dataset"]["shards"])
    assert manifest["pipeline"]["columns"] == ["idx"] and len(manifest["pipeline"]["hash"]) == 16
    assert manifest["order"] == {"world_size": 2, "batch_size": 4, "shuffle": True, "seed": 5, "drop_last": False,
                                 "shuffle_block": 0, "weights": "", "bucket_by": "", "bucket_window": 0}
    assert set(manifest["service"]) == {"shardstream", "torch", "pyarrow", "pillow", "simplejpeg", "tokenizers",
                                        "python", "native_jpeg_crop"}
    assert manifest["service"]["native_jpeg_crop"].count(".") == 2  # the libjpeg-turbo it was built with
    assert manifest["service"]["torch"] and manifest["service"]["pyarrow"]


def test_a_resume_after_a_file_or_the_transform_changed_is_refused_naming_it(
        service_address: str, tmp_path: object) -> None:
    directory = f"{tmp_path}/data"
    paths = write_indexed(directory, [12, 12])
    with loader(service_address, directory, 1, 0, 4, transform="tests.transforms:scaled",
                transform_args={"factor": 2}, columns=["idx", "x"], job_name="changed-1") as first:
        next(iter(first))
        state = first.state_dict()
    with loader(service_address, directory, 1, 0, 4, transform="tests.transforms:scaled",
                transform_args={"factor": 3}, columns=["idx", "x"], job_name="changed-2") as other, \
            pytest.raises(CheckpointMismatch, match=r"pipeline transform_args: \{'factor': 2\} -> \{'factor': 3\}"):
        other.load_state_dict(state)
    os.utime(paths[1], (1, 1))  # a rewritten file: a new version
    with loader(service_address, directory, 1, 0, 4, transform="tests.transforms:scaled",
                transform_args={"factor": 2}, columns=["idx", "x"], job_name="changed-3") as again, \
            pytest.raises(CheckpointMismatch, match=r"1 file\(s\) changed: .*part-00001\.parquet \(size \d+ -> \d+, "
                          r"version 'mtime=[\d.]+,ino=\d+,size=\d+,ctime=[\d.]+' -> 'mtime=1\.0,"):
        again.load_state_dict(state)
