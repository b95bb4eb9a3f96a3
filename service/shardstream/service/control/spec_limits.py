"""A job's request held to the service's limits (limits.py), before any of it is parsed or read.

Sizes first (counts, lengths, the JSON texts' bytes and nesting), so nothing later parses an
unbounded text or recurses once per level of it; then the numbers that size what the service
makes for the job (world_size, batch_size, ...), including the few inside the JSON options that
size a sample (a token window's seq_len or a tokenized text's max_length, a JSON line's bytes,
an image's sides).
"""

from __future__ import annotations

import json
from typing import Any

from shardstream.proto.job_options import DECLARED
from shardstream.proto.option_wire import proto_field
from shardstream.proto.v1 import loader_pb2 as pb
from shardstream.service.limits import RequestLimits, beyond, check_at_most, json_depth

_SHOWN = 60  # characters of an over-long string quoted in the refusal


def check_job_message(msg: pb.JobSpec, limits: RequestLimits) -> None:
    """InvalidJobSpec naming the first field of `msg` past a limit: each option's limits, as its
    declaration names them (shardstream.proto.job_options)."""
    parsed: dict[str, Any] = {}
    for name, declared in DECLARED.items():
        if not declared.limits:
            continue
        value = proto_field(msg, declared.proto)
        if isinstance(value, str) and declared.limits == ("args_bytes",):
            parsed[name] = _bounded_json(name, value, limits)
        elif isinstance(value, str):
            _check_length(name, value, limits, declared.limits[0])
        elif isinstance(value, int):
            check_at_most(name, value, limits, declared.limits[0])
        else:  # a list of strings: its length, then each one's
            count, each = declared.limits
            check_at_most(f"the number of {_PLURAL.get(name, name)}", len(value), limits, count)
            for item in value:
                _check_length(_ITEM.get(name, name), item, limits, each)
    _check_sample_size(msg.transform.name, parsed.get("transform_args"), parsed.get("format_args"), limits)
    mixture = parsed.get("mixture")
    for source in mixture.get("sources", []) if isinstance(mixture, dict) else []:  # each source's format_args
        if isinstance(source, dict):
            _check_format_args(source.get("format_args"), limits)


_PLURAL = {"dataset": "dataset entries"}
_ITEM = {"dataset": "dataset URL", "columns": "column name"}


def check_open_request(request: pb.OpenJobRequest, limits: RequestLimits) -> None:
    """The OpenJobRequest's own fields (its spec: check_job_message)."""
    _check_length("job_name", request.job_name, limits, "name_chars")
    _check_length("priority", request.priority, limits, "name_chars")


def check_job_id(job_id: str, limits: RequestLimits) -> None:
    """The job id a ListDecoders or GetManifest request names, before it is looked up or quoted."""
    _check_length("job_id", job_id, limits, "name_chars")


def _check_length(field: str, text: str, limits: RequestLimits, name: str) -> None:
    limit: int = getattr(limits, name)
    if len(text) > limit:
        raise beyond(f"{field} {text[:_SHOWN] + '...'!r} ({len(text):,} characters)", limit, name)


def _bounded_json(field: str, text: str, limits: RequestLimits) -> Any:
    """The JSON text parsed, once it is known to be small and shallow enough to parse; None when
    it does not parse (JobSpec says why)."""
    size = len(text.encode())
    check_at_most(f"{field} (JSON, bytes)", size, limits, "args_bytes")
    depth = json_depth(text)
    if depth > limits.args_depth:
        raise beyond(f"{field}'s nesting, {depth} levels deep,", limits.args_depth, "args_depth")
    try:
        return json.loads(text or "{}")
    except (ValueError, RecursionError):
        return None


def _check_sample_size(transform: str, transform_args: Any, format_args: Any, limits: RequestLimits) -> None:
    """The options that size every sample: a token window's seq_len, a JSON line's max_line_bytes, the
    tokenize transform's max_length, an image transform's sides."""
    _check_format_args(format_args, limits)
    if transform == "tokenize" and isinstance(transform_args, dict):
        _check_int("transform_args max_length", transform_args.get("max_length"), limits, "seq_len")
    if transform == "image" and isinstance(transform_args, dict):
        size = transform_args.get("size")
        for side in size if isinstance(size, list) else [size]:
            _check_int("transform_args size", side, limits, "image_side")
        _check_int("transform_args resize_short", transform_args.get("resize_short"), limits, "image_side")


def _check_format_args(format_args: Any, limits: RequestLimits) -> None:
    if isinstance(format_args, dict):
        _check_int("format_args seq_len", format_args.get("seq_len"), limits, "seq_len")
        _check_int("format_args max_line_bytes", format_args.get("max_line_bytes"), limits, "line_bytes")


def _check_int(field: str, value: Any, limits: RequestLimits, name: str) -> None:
    if isinstance(value, int) and not isinstance(value, bool):
        check_at_most(field, value, limits, name)


__all__ = ["check_job_id", "check_job_message", "check_open_request"]
