"""The bounds every request is held to, so no field value makes the service hold unbounded memory.

Each bound is a ServiceConfig setting (`max_<name>`, config.py) whose default is here; the head
checks a job's fields when it parses them (control/spec_limits.py), a decode actor the fields of a
FetchBatches stream (node/batch_server.py). A value past a bound is refused with InvalidJobSpec
naming the field, its value, the bound and the setting that raises it. Why each default is what
it is: docs/architecture.md, "Limits".
"""

from __future__ import annotations

from dataclasses import dataclass

from shardstream.proto.errors import InvalidJobSpec


@dataclass(frozen=True)
class RequestLimits:
    """The bounds themselves; the field names are the settings' without `max_`."""

    world_size: int = 65_536
    batch_size: int = 1_048_576
    shuffle_block: int = 2**30
    bucket_window: int = 65_536  # batches
    epoch: int = 2**31 - 1
    seq_len: int = 1_048_576  # tokens per sample (format "tokens"; transform "tokenize": max_length, or any text)
    line_bytes: int = 16 * 2**20  # a line of a JSON Lines file (format "jsonl"), held whole while parsed
    image_side: int = 8_192  # pixels (transform "image": size, resize_short)
    dataset_entries: int = 100_000
    columns: int = 10_000
    url_chars: int = 4_096
    name_chars: int = 1_024
    args_bytes: int = 65_536  # transform_args / format_args, as JSON
    args_depth: int = 32  # their nesting


DEFAULT_LIMITS = RequestLimits()
DEFAULT_MAX_JOBS = 1_024  # jobs a service holds at once (its max_jobs setting; control/jobs.py)
# The storage protocols the service reads datasets from, as fsspec names each first ("local" is
# "file", "gcs" is "gs", "s3a" is "s3"): the default of its dataset_protocols setting (control/access.py).
DATASET_PROTOCOLS = ("file", "gs", "s3")


def beyond(what: str, limit: int, name: str) -> InvalidJobSpec:
    """The refusal of `what` ("world_size 134217728") past `limit`, the bound of setting max_<name>."""
    setting = f"max_{name}"
    return InvalidJobSpec(f"{what} is above this service's limit of {limit:,} (its {setting} setting: "
                          f"--{setting.replace('_', '-')} or SHARDSTREAM_{setting.upper()} raises it)")


def check_at_most(field: str, value: int, limits: RequestLimits, name: str) -> None:
    """InvalidJobSpec unless `value` of `field` is at most the bound of setting max_<name>."""
    limit: int = getattr(limits, name)
    if value > limit:
        raise beyond(f"{field} {value:,}", limit, name)


def json_depth(text: str) -> int:
    """How deeply a JSON text's arrays and objects nest, counted without parsing it (a parser
    recurses once per level), in one pass (no pattern that could backtrack). Brackets inside
    strings do not count."""
    depth = deepest = 0
    in_string = escaped = False
    for c in text:
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth -= 1
    return deepest


__all__ = ["DATASET_PROTOCOLS", "DEFAULT_LIMITS", "DEFAULT_MAX_JOBS", "RequestLimits", "beyond", "check_at_most", "json_depth"]
