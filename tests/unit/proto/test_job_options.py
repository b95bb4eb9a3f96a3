"""JobOptions, the job spec declared once: validation (the same on client and service), the
proto conversion both ways, the one fingerprint (older checkpoints' included), differences and
what the manifest records."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from shardstream.proto.errors import InvalidJobSpec, ProtocolMismatch
from shardstream.proto.job_options import DECLARED, JobOptions, fingerprint
from shardstream.proto.v1 import loader_pb2 as pb
from shardstream.service.control.reproducibility import job_manifest
from shardstream.service.control.spec import read_spec
from shardstream.service.dataset import DatasetIndex

# A value other than the default for every option: the round trip and fingerprint tests below
# cover every declared option, and fail for one declared without a value here.
OTHER: dict[str, Any] = {
    "dataset": ("/data/b", "/data/c"), "batch_size": 5, "shuffle": False, "seed": 2, "drop_last": True,
    "world_size": 3, "transform": "image", "transform_args": {"size": 8, "flip": True}, "columns": ("a", "b"),
    "on_corrupt": "skip", "shuffle_block": 100, "weights": "w", "bucket_by": "length", "bucket_window": 8,
    "format": "tokens", "format_args": {"seq_len": 16}, "seq_len": 32, "dtype": "uint16", "url_column": "u",
    "collate": "pad", "pad_value": -1.5, "nulls": "mask", "augment_seed": 0,
    "mixture": {"sources": [{"name": "a", "dataset": ["/x"], "format": "", "format_args": {}}],
                "phases": [[0, [1.0]]]},
}
TOGETHER: dict[str, dict[str, Any]] = {  # what an option needs beside it
    "shuffle_block": {"shuffle": True}, "bucket_window": {"bucket_by": "length"}, "bucket_by": {"bucket_window": 8},
    "mixture": {"dataset": ()},
}
# Fingerprints the loader of protocol version 4 wrote into checkpoints (its client/state.py over its
# job_spec()), for dataset "/d", batch_size 8, world_size 2: a checkpoint taken then still resumes.
OLDER_CHECKPOINTS = [
    ({}, "9a48ad44cf2ba440"),
    ({"transform": "image", "transform_args": {"size": 224, "flip": True}}, "c80dd6046d1cfa99"),
    ({"shuffle": False, "seed": 7, "drop_last": True}, "ffb0425c53b2bccd"),
    ({"shuffle_block": 100}, "e29bfa0141556657"),
    ({"columns": ["a", "b"]}, "3df79f88f46c89e3"),
    ({"on_corrupt": "skip"}, "1195d944c426c39a"),
    ({"format": "tokens", "seq_len": 16, "dtype": "uint16"}, "48b0b8d8a2c63dd1"),
    ({"format": "manifest", "url_column": "u", "format_args": {"x": 1}}, "adc19c1049a391fa"),
    ({"collate": "pad", "pad_value": -1.5}, "7bf494185c3b77d2"),
    ({"weights": "w"}, "e631944ed1c484d6"),
    ({"bucket_by": "len"}, "e9cd3e19da25f157"),
    ({"bucket_by": "len", "bucket_window": 8}, "07c6927cb8fb7938"),
    ({"nulls": "mask"}, "70799ca5e55d1632"),
    ({"nulls": "refuse"}, "9a48ad44cf2ba440"),
]


def make(**overrides: Any) -> JobOptions:
    values: dict[str, Any] = dict(dataset=("/data/a",), batch_size=4, seed=1, world_size=2)
    values.update(overrides)
    return JobOptions(**values)


def message(**overrides: Any) -> pb.JobSpec:
    values: dict[str, Any] = dict(dataset=["/data/a"], batch_size=4, shuffle=True, seed=1, world_size=2)
    values.update(overrides)
    return pb.JobSpec(**values)


def other(name: str) -> JobOptions:
    return make(**{name: OTHER[name], **TOGETHER.get(name, {})})


def test_every_option_has_a_value_to_test_with() -> None:
    assert set(OTHER) == set(DECLARED)


@pytest.mark.parametrize(("overrides", "needle"), [
    ({"dataset": ()}, "dataset is empty"),
    ({"dataset": ("/a", "")}, "dataset has an empty entry"),
    ({"mixture": OTHER["mixture"]}, "names each source's dataset itself"),
    ({"dataset": (), "mixture": OTHER["mixture"], "weights": "w"}, "weights and a Mixture"),
    ({"dataset": (), "mixture": {"sources": []}}, "at least one source"),
    ({"batch_size": 0}, "batch_size must be > 0"),
    ({"batch_size": -3}, "batch_size must be > 0"),
    ({"batch_size": True}, "batch_size must be int"),
    ({"batch_size": "8"}, "batch_size must be int"),
    ({"world_size": 0}, "world_size must be > 0"),
    ({"on_corrupt": "ignore"}, "on_corrupt must be 'fail' or 'skip'"),
    ({"columns": ("a", "b", "a")}, "duplicates"),
    ({"columns": ("a", 3)}, "columns must be strings"),
    ({"nulls": "drop"}, "nulls must be 'refuse' or 'mask'"),
    ({"pad_value": float("nan")}, "pad_value must be a finite number"),
    ({"shuffle_block": -1}, "shuffle_block must be >= 0"),
    ({"shuffle_block": 8, "shuffle": False}, "shuffle_block is a way to shuffle"),
    ({"shuffle_block": 8, "weights": "w"}, "choose one"),
    ({"bucket_by": "n"}, "bucket_window must be a number of batches > 0 with bucket_by"),
    ({"bucket_window": 4}, "bucket_window needs bucket_by"),
    ({"seq_len": 8, "format_args": {"seq_len": 9}}, "seq_len=8 and format_args"),
    ({"seed": 2**63}, r"seed 9223372036854775808 does not fit the int64"),
    ({"augment_seed": -(2**63) - 1}, "augment_seed .* does not fit the int64"),
    ({"world_size": 2**31}, "world_size 2147483648 does not fit the int32"),
    ({"shuffle_block": 2**70, "shuffle": True}, "shuffle_block .* does not fit the int64"),
])
def test_invalid_options_are_refused(overrides: dict[str, Any], needle: str) -> None:
    with pytest.raises(InvalidJobSpec, match=needle):
        make(**overrides)


@pytest.mark.parametrize("name", sorted(DECLARED))
def test_every_option_crosses_the_wire_both_ways(name: str) -> None:
    spec = other(name)
    back = JobOptions.from_proto(spec.to_proto())
    if DECLARED[name].fold:  # a shorthand arrives inside the option it folds into
        assert getattr(back, DECLARED[name].fold)[name] == OTHER[name]
    else:
        assert back == spec


@pytest.mark.parametrize("name", sorted(DECLARED))
def test_the_fingerprint_and_differences_see_every_option(name: str) -> None:
    base, changed = make(), other(name)
    if DECLARED[name].shape:  # a checkpoint resumes at another world size: only the job's identity changes
        assert changed.fingerprint == base.fingerprint and changed.identity != base.identity
    else:
        assert changed.fingerprint != base.fingerprint
    assert any(d.startswith(f"{name}: ") for d in base.differences(changed))


def test_augment_seed_zero_is_a_seed_and_unset_is_seed() -> None:
    unset, zero = make(seed=5), make(seed=5, augment_seed=0)
    assert not unset.to_proto().HasField("augment_seed") and zero.to_proto().HasField("augment_seed")
    assert JobOptions.from_proto(zero.to_proto()).augment_seed == 0
    assert JobOptions.from_proto(unset.to_proto()).augment_seed is None
    assert (unset.sample_seed, zero.sample_seed) == (5, 0)
    assert unset.fingerprint == make(seed=5).fingerprint != zero.fingerprint  # unset: as before the option


def test_no_differences_between_equal_specs() -> None:
    assert make().differences(make()) == []
    assert [d.split(":")[0] for d in make().differences(make(batch_size=8, seed=9))] == ["batch_size", "seed"]


@pytest.mark.parametrize(("given", "expected"), OLDER_CHECKPOINTS)
def test_older_checkpoints_fingerprints_still_match(given: dict[str, Any], expected: str) -> None:
    spec = JobOptions.given(dataset="/d", batch_size=8, world_size=2, **given)
    assert spec.fingerprint == expected
    assert fingerprint(spec.to_proto()) == expected


def test_given_reads_keywords_as_a_loader_takes_them() -> None:
    spec = JobOptions.given(dataset="/d", batch_size=8, transform=None, columns=["a"], nulls="refuse",
                            shuffle_block=None, bucket_window=64)
    assert spec == make(dataset=("/d",), batch_size=8, seed=0, world_size=1, columns=("a",))
    assert JobOptions.given(dataset="/d", batch_size=1, bucket_by="n").bucket_window == 64
    with pytest.raises(TypeError, match="unknown job options: sead"):
        JobOptions.given(dataset="/d", batch_size=1, sead=3)


def test_from_proto_defaults_and_refusals() -> None:
    spec = read_spec(message())
    assert (spec.transform, spec.transform_args, spec.on_corrupt, spec.columns, spec.nulls) == ("", {}, "fail", (), "")
    for args_json in ("{not json", "[1, 2]", "3", '"s"'):
        with pytest.raises(InvalidJobSpec, match="transform args"):
            read_spec(message(transform=pb.TransformSpec(name="image", args_json=args_json)))
    with pytest.raises(InvalidJobSpec, match="unknown on_corrupt policy 7"):
        read_spec(message(on_corrupt=7))  # proto3 enums are open
    with pytest.raises(InvalidJobSpec, match="nulls must be 'refuse' or 'mask', got 'drop'"):
        read_spec(message(nulls="drop"))


def test_two_spellings_of_the_same_arguments_are_one_job() -> None:
    a = read_spec(message(transform=pb.TransformSpec(name="image", args_json='{"b": 1, "a": [1, 2]}')))
    b = read_spec(message(transform=pb.TransformSpec(name="image", args_json='{"a":[1,2],"b":1}')))
    assert a == b and a.identity == b.identity


def test_the_manifest_records_options_by_their_declarations() -> None:
    index = DatasetIndex(shards=(), schema=pa.schema([]))
    plain, masked = job_manifest(make(), index), job_manifest(make(nulls="mask"), index)
    assert "nulls" not in plain["pipeline"] and masked["pipeline"]["nulls"] == "mask"
    assert masked["pipeline"]["hash"] != plain["pipeline"]["hash"]
    recorded = {name for name, d in DECLARED.items() if d.record == "order"}
    assert recorded == {"world_size", "batch_size", "shuffle", "seed", "drop_last", "shuffle_block", "weights",
                        "bucket_by", "bucket_window", "mixture"}
    assert set(plain["order"]) == recorded - {"mixture"}  # a mixture is recorded only when set
    assert other("mixture").recorded("order")["mixture"] == OTHER["mixture"]
    # pipeline hashes as manifests recorded them before the declarations (checkpoints carry them)
    assert plain["pipeline"]["hash"] == "12818089324470b0"
    full = make(transform="image", transform_args={"size": 8, "flip": True}, collate="pad", pad_value=-1.5,
                on_corrupt="skip", columns=("a", "b"), nulls="mask")
    assert job_manifest(full, index)["pipeline"]["hash"] == "47a5be746f441ba3"


def test_an_option_this_service_does_not_know_is_refused_not_ignored() -> None:
    known = message().SerializeToString()
    newer = pb.JobSpec.FromString(known + b"\xf8\x06\x05")  # field 111, a varint: an option of a newer client
    with pytest.raises(ProtocolMismatch, match="field 111, which this service does not know"):
        read_spec(newer)
    spec = pb.JobSpec.FromString(known)
    spec.transform.MergeFromString(b"\x18\x01")  # field 3 of TransformSpec
    with pytest.raises(ProtocolMismatch, match="field 3"):
        read_spec(spec)
