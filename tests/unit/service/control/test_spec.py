"""JobSpec: validation, from_proto, fingerprint, differences."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from shardstream.proto.errors import InvalidJobSpec
from shardstream.proto.v1 import loader_pb2 as pb
from shardstream.service.control.spec import JobSpec


def make(**overrides: Any) -> JobSpec:
    values: dict[str, Any] = dict(dataset=("/data/a",), batch_size=4, shuffle=True, seed=1,
                                  drop_last=False, world_size=2)
    values.update(overrides)
    return JobSpec(**values)


def message(**overrides: Any) -> pb.JobSpec:
    values: dict[str, Any] = dict(dataset=["/data/a"], batch_size=4, shuffle=True, seed=1,
                                  drop_last=False, world_size=2)
    values.update(overrides)
    return pb.JobSpec(**values)


@pytest.mark.parametrize(("overrides", "needle"), [
    ({"dataset": ()}, "dataset"),
    ({"dataset": ("/a", "")}, "dataset"),
    ({"batch_size": 0}, "batch_size"),
    ({"batch_size": -3}, "batch_size"),
    ({"world_size": 0}, "world_size"),
    ({"on_corrupt": "ignore"}, "on_corrupt"),
    ({"columns": ("a", "b", "a")}, "duplicates"),
])
def test_invalid_specs_are_refused(overrides: dict[str, Any], needle: str) -> None:
    with pytest.raises(InvalidJobSpec, match=needle):
        make(**overrides)


def test_valid_spec_is_accepted() -> None:
    spec = make(columns=("a", "b"), on_corrupt="skip")
    assert spec.columns == ("a", "b")
    assert spec.transform_kwargs == {}


def test_from_proto_copies_every_field() -> None:
    msg = message(dataset=["/x", "/y"], batch_size=7, shuffle=False, seed=42, drop_last=True,
                  world_size=3, transform=pb.TransformSpec(name="image", args_json='{"size": 16}'),
                  columns=["image", "label"], on_corrupt=pb.CORRUPT_POLICY_SKIP)
    spec = JobSpec.from_proto(msg)
    assert spec == JobSpec(dataset=("/x", "/y"), batch_size=7, shuffle=False, seed=42,
                           drop_last=True, world_size=3, transform="image",
                           transform_args='{"size":16}', columns=("image", "label"),
                           on_corrupt="skip")
    assert spec.transform_kwargs == {"size": 16}


def test_from_proto_defaults() -> None:
    spec = JobSpec.from_proto(message())
    assert spec.transform == ""
    assert spec.transform_args == "{}"
    assert spec.on_corrupt == "fail"
    assert spec.columns == ()


@pytest.mark.parametrize("args_json", ["{not json", "[1, 2]", "3", '"s"'])
def test_from_proto_refuses_bad_transform_args(args_json: str) -> None:
    msg = message(transform=pb.TransformSpec(name="image", args_json=args_json))
    with pytest.raises(InvalidJobSpec, match="transform args"):
        JobSpec.from_proto(msg)


def test_from_proto_refuses_unknown_corrupt_policy() -> None:
    with pytest.raises(InvalidJobSpec, match="on_corrupt"):
        JobSpec.from_proto(message(on_corrupt=7))  # proto3 enums are open


def test_from_proto_validates() -> None:
    with pytest.raises(InvalidJobSpec, match="batch_size"):
        JobSpec.from_proto(message(batch_size=0))
    with pytest.raises(InvalidJobSpec, match="dataset"):
        JobSpec.from_proto(message(dataset=[]))


def test_transform_args_are_canonical_so_fingerprints_agree() -> None:
    a = JobSpec.from_proto(message(transform=pb.TransformSpec(name="image",
                                                              args_json='{"b": 1, "a": [1, 2]}')))
    b = JobSpec.from_proto(message(transform=pb.TransformSpec(name="image",
                                                              args_json='{"a":[1,2],"b":1}')))
    assert a == b
    assert a.fingerprint == b.fingerprint


def test_fingerprint_is_stable_and_short() -> None:
    fp = make().fingerprint
    assert fp == make().fingerprint
    assert len(fp) == 16
    int(fp, 16)


@pytest.mark.parametrize(("name", "value"), [
    ("dataset", ("/data/b",)),
    ("batch_size", 5),
    ("shuffle", False),
    ("seed", 2),
    ("drop_last", True),
    ("world_size", 3),
    ("transform", "image"),
    ("transform_args", '{"size":8}'),
    ("columns", ("a",)),
    ("on_corrupt", "skip"),
    ("nulls", "mask"),
])
def test_fingerprint_and_differences_see_every_field(name: str, value: Any) -> None:
    base = make()
    other = dataclasses.replace(base, **{name: value})
    assert other.fingerprint != base.fingerprint
    diffs = base.differences(other)
    assert len(diffs) == 1
    assert diffs[0].startswith(f"{name}: ")
    assert repr(value) in diffs[0]


def test_no_differences_between_equal_specs() -> None:
    assert make().differences(make()) == []


def test_differences_list_every_differing_field() -> None:
    diffs = make().differences(make(batch_size=8, seed=9))
    assert [d.split(":")[0] for d in diffs] == ["batch_size", "seed"]


def test_nulls_travel_from_the_client_and_are_checked() -> None:
    from shardstream.client.job_spec import job_spec

    options: dict[str, Any] = dict(batch_size=4, shuffle=True, seed=1, drop_last=False, world_size=2,
                                   shuffle_block=None, transform=None, transform_args=None, columns=None,
                                   on_corrupt="fail", format=None, format_args=None, seq_len=None, dtype=None,
                                   url_column=None, collate=None, pad_value=0.0, weights=None, bucket_by=None,
                                   bucket_window=64)
    default = JobSpec.from_proto(job_spec("/data/a", **options))
    assert default.nulls == "" and default == JobSpec.from_proto(job_spec("/data/a", nulls="refuse", **options))
    assert default.fingerprint == make(world_size=2).fingerprint  # unset: the fingerprint jobs had before
    assert JobSpec.from_proto(job_spec("/data/a", nulls="mask", **options)).nulls == "mask"
    with pytest.raises(InvalidJobSpec, match="nulls must be 'refuse' or 'mask'"):
        job_spec("/data/a", nulls="drop", **options)
    with pytest.raises(InvalidJobSpec, match=r"nulls must be '' \(refuse\) or 'mask', got 'drop'"):
        JobSpec.from_proto(pb.JobSpec(dataset=["/data/a"], batch_size=1, world_size=1, nulls="drop"))


def test_the_manifest_lists_nulls_only_when_set() -> None:
    import pyarrow as pa

    from shardstream.service.control.reproducibility import job_manifest
    from shardstream.service.dataset import DatasetIndex

    index = DatasetIndex(shards=(), schema=pa.schema([]))
    plain, masked = job_manifest(make(), index)["pipeline"], job_manifest(make(nulls="mask"), index)["pipeline"]
    assert "nulls" not in plain and masked["nulls"] == "mask" and masked["hash"] != plain["hash"]
