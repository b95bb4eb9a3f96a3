"""How a job option travels in a `JobSpec` field (job_options.py declares which, and how): a JSON
object's text, a corrupt policy's enum, a list, or the value as it is; and the field at a dotted
path ("transform.args_json") of a message."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from shardstream.proto.errors import InvalidJobSpec
from shardstream.proto.v1 import loader_pb2 as pb

CORRUPT_POLICIES = {"fail": pb.CORRUPT_POLICY_FAIL, "skip": pb.CORRUPT_POLICY_SKIP}


def proto_field(msg: Any, path: str) -> Any:
    """The field at `path` ("transform.name") of a message."""
    for part in path.split("."):
        msg = getattr(msg, part)
    return msg


def set_field(msg: Any, path: str, value: Any) -> None:
    *parents, last = path.split(".")
    for part in parents:
        msg = getattr(msg, part)
    if isinstance(value, (list, tuple)):
        getattr(msg, last).extend(value)
    else:
        setattr(msg, last, value)


def encode(wire: str, value: Any, canonical: bool) -> Any:
    """The field's value for an option's `value` (`wire`: Option.wire); `canonical`: JSON in one spelling."""
    if wire == "json" and canonical:
        return json.dumps(dict(value), sort_keys=True, separators=(",", ":"))
    if wire == "json":
        return json.dumps(dict(value))  # as given (the fingerprint of older checkpoints hashed this text)
    if wire == "policy":
        return CORRUPT_POLICIES[value]
    return list(value) if isinstance(value, tuple) else value


def decode(name: str, wire: str, value: Any) -> Any:
    """Option `name`'s value from its field's `value`."""
    if wire == "json":
        return _object(value, name.replace("_", " "))
    if wire == "policy":
        return _policy(value, name)
    return tuple(value) if isinstance(value, Sequence) and not isinstance(value, str) else value


def _object(text: str, what: str) -> dict[str, Any]:
    """A JSON object option; "" is {}."""
    try:
        parsed = json.loads(text or "{}")
    except (ValueError, RecursionError) as exc:  # ValueError: JSONDecodeError, or an integer of >4300 digits
        raise InvalidJobSpec(f"{what} are not valid JSON: {exc}") from None
    if not isinstance(parsed, dict):
        raise InvalidJobSpec(f"{what} must be a JSON object")
    return parsed


def _policy(value: int, name: str) -> str:
    policies: dict[int, str] = {number: word for word, number in CORRUPT_POLICIES.items()}
    if value not in policies:  # proto3 enums are open
        raise InvalidJobSpec(f"unknown {name} policy {value}")
    return policies[value]


__all__ = ["CORRUPT_POLICIES", "decode", "encode", "proto_field", "set_field"]
