"""Every numeric field, count, length and JSON option of a job is held to the service's limits:
at the limit it is accepted, one past it is refused with InvalidJobSpec naming the field, the
value, the limit and the setting that raises it."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from shardstream.proto.errors import InvalidJobSpec
from shardstream.proto.v1 import loader_pb2 as pb
from shardstream.service.config import ServiceConfig
from shardstream.service.control.spec import read_spec
from shardstream.service.control.spec_limits import check_open_request
from shardstream.service.limits import DEFAULT_LIMITS, RequestLimits, json_depth

L = DEFAULT_LIMITS


def message(**overrides: Any) -> pb.JobSpec:
    values: dict[str, Any] = dict(dataset=["/data/a"], batch_size=4, shuffle=True, seed=1, drop_last=False,
                                  world_size=2)
    values.update(overrides)
    return pb.JobSpec(**values)


def nested(depth: int) -> str:
    return '{"a": ' * depth + "1" + "}" * depth


def image(**args: Any) -> dict[str, Any]:
    return {"transform": pb.TransformSpec(name="image", args_json=json.dumps(args))}


# (what to set to the limit, the same one past it, the setting named, the field named)
def mixture_of(seq_len: int = 8, n: int = 1) -> str:
    """A mixture's JSON: n sources of token windows of seq_len."""
    return json.dumps({"sources": [{"name": f"s{i}", "dataset": [f"/d{i}"], "format": "tokens",
                                    "format_args": {"seq_len": seq_len}} for i in range(n)],
                       "phases": [[0, [1] * n]]})


CASES: list[tuple[dict[str, Any], dict[str, Any], str, str]] = [
    ({"world_size": L.world_size}, {"world_size": L.world_size + 1}, "max_world_size", "world_size 65,537"),
    ({"world_size": L.world_size}, {"world_size": 2**31 - 1}, "max_world_size", "world_size 2,147,483,647"),
    ({"batch_size": L.batch_size}, {"batch_size": L.batch_size + 1}, "max_batch_size", "batch_size 1,048,577"),
    ({"batch_size": L.batch_size}, {"batch_size": 2**63 - 1}, "max_batch_size", "batch_size"),
    ({"shuffle_block": L.shuffle_block}, {"shuffle_block": L.shuffle_block + 1}, "max_shuffle_block",
     "shuffle_block"),
    ({"bucket_window": L.bucket_window, "bucket_by": "n"}, {"bucket_window": L.bucket_window + 1, "bucket_by": "n"},
     "max_bucket_window", "bucket_window 65,537"),
    ({"dataset": ["/d"] * L.dataset_entries}, {"dataset": ["/d"] * (L.dataset_entries + 1)},
     "max_dataset_entries", "the number of dataset entries 100,001"),
    ({"dataset": ["/" + "d" * (L.url_chars - 1)]}, {"dataset": ["/" + "d" * L.url_chars]}, "max_url_chars",
     "dataset URL '/ddd"),
    ({"columns": [f"c{i}" for i in range(L.columns)]}, {"columns": [f"c{i}" for i in range(L.columns + 1)]},
     "max_columns", "the number of columns 10,001"),
    ({"columns": ["c" * L.name_chars]}, {"columns": ["c" * (L.name_chars + 1)]}, "max_name_chars", "column name"),
    ({"weights": "w" * L.name_chars}, {"weights": "w" * (L.name_chars + 1)}, "max_name_chars", "weights"),
    ({"format": "tokens", "format_args_json": json.dumps({"seq_len": L.seq_len})},
     {"format": "tokens", "format_args_json": json.dumps({"seq_len": L.seq_len + 1})}, "max_seq_len",
     "format_args seq_len 1,048,577"),
    ({"transform": pb.TransformSpec(name="tokenize", args_json=json.dumps({"max_length": L.seq_len}))},
     {"transform": pb.TransformSpec(name="tokenize", args_json=json.dumps({"max_length": L.seq_len + 1}))},
     "max_seq_len", "transform_args max_length 1,048,577"),
    ({"format": "jsonl", "format_args_json": json.dumps({"max_line_bytes": L.line_bytes})},
     {"format": "jsonl", "format_args_json": json.dumps({"max_line_bytes": L.line_bytes + 1})}, "max_line_bytes",
     "format_args max_line_bytes 16,777,217"),
    ({"dataset": [], "mixture_json": mixture_of(seq_len=L.seq_len)},
     {"dataset": [], "mixture_json": mixture_of(seq_len=L.seq_len + 1)},
     "max_seq_len", "format_args seq_len 1,048,577"),
    ({"dataset": [], "mixture_json": mixture_of(n=200)}, {"dataset": [], "mixture_json": mixture_of(n=1_000)},
     "max_args_bytes",
     "mixture (JSON, bytes) 93,812"),
    (image(size=L.image_side), image(size=L.image_side + 1), "max_image_side", "transform_args size 8,193"),
    (image(size=[8, L.image_side]), image(size=[8, 2**40]), "max_image_side", "transform_args size"),
    (image(resize_short=L.image_side), image(resize_short=L.image_side + 1), "max_image_side",
     "transform_args resize_short"),
    ({"transform": pb.TransformSpec(name="x", args_json=nested(L.args_depth))},
     {"transform": pb.TransformSpec(name="x", args_json=nested(L.args_depth + 1))}, "max_args_depth",
     "transform_args's nesting, 33 levels deep,"),
    ({"format_args_json": nested(L.args_depth)}, {"format_args_json": "[" * 60_000}, "max_args_depth",
     "format_args's nesting, 60000 levels deep,"),
    ({"format_args_json": json.dumps({"k": "x" * (L.args_bytes - 9)})},
     {"format_args_json": json.dumps({"k": "x" * (L.args_bytes - 8)})}, "max_args_bytes",
     "format_args (JSON, bytes) 65,537"),
]


@pytest.mark.parametrize(("at", "past", "setting", "field"), CASES)
def test_at_the_limit_is_accepted_and_past_it_refused_naming_field_value_and_setting(
        at: dict[str, Any], past: dict[str, Any], setting: str, field: str) -> None:
    read_spec(message(**at))
    with pytest.raises(InvalidJobSpec) as refused:
        read_spec(message(**past))
    text = str(refused.value)
    assert field in text and setting in text and f"--{setting.replace('_', '-')}" in text, text
    assert f"limit of {getattr(L, setting.removeprefix('max_')):,}" in text, text


def test_the_services_own_settings_are_the_limits() -> None:
    config = ServiceConfig(max_world_size=8, max_args_depth=2)
    assert config.request_limits == RequestLimits(world_size=8, args_depth=2)
    read_spec(message(world_size=8), config.request_limits)
    with pytest.raises(InvalidJobSpec, match="world_size 9 is above this service's limit of 8"):
        read_spec(message(world_size=9), config.request_limits)
    with pytest.raises(InvalidJobSpec, match="max_args_depth"):
        read_spec(message(format_args_json=nested(3)), config.request_limits)


@pytest.mark.parametrize("text", ["[" * 200_000, '{"a":' * 50_000, "1" * 5000, '{"n": ' + "9" * 5000 + "}"])
def test_json_options_that_python_cannot_parse_are_a_bad_spec(text: str) -> None:
    """Deep nesting (a RecursionError in the parser) and integers longer than Python converts."""
    limits = RequestLimits(args_depth=10**6, args_bytes=10**7)  # the parser itself, not the bounds
    with pytest.raises(InvalidJobSpec, match="transform args"):
        read_spec(message(transform=pb.TransformSpec(name="x", args_json=text)), limits)


def test_json_depth_skips_brackets_in_strings() -> None:
    assert json_depth('{"a": "[[[[{{{{", "b": [1, [2]], "c": "\\"[["}') == 3
    assert json_depth("") == 0 and json_depth("[]") == 1


def test_open_request_names_and_priority_are_bounded() -> None:
    check_open_request(pb.OpenJobRequest(job_name="j" * L.name_chars, priority="p"), L)
    for request in (pb.OpenJobRequest(job_name="j" * (L.name_chars + 1)),
                    pb.OpenJobRequest(priority="p" * (L.name_chars + 1))):
        with pytest.raises(InvalidJobSpec, match="max_name_chars"):
            check_open_request(request, L)


@pytest.mark.parametrize("text", ['"\\' * 21_845, '\\"' * 32_768, '"' + "a" * 65_535, "[" * 65_536])
def test_counting_the_nesting_of_a_largest_text_is_linear(text: str) -> None:
    """No backtracking on unterminated strings: a 64 KiB text is counted in milliseconds, not seconds."""
    started = time.perf_counter()
    json_depth(text)
    assert time.perf_counter() - started < 0.5
