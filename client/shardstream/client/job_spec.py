"""The job spec a loader asks the service for, from RemoteLoader's arguments.

Everything that decides which samples a rank sees and how they look; the
service validates it again (service/control/spec.py). Here only what the
client can tell at once is refused: an unknown corrupt policy or nulls policy, a
format option given twice with two values.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from shardstream.proto.errors import InvalidJobSpec
from shardstream.proto.v1 import loader_pb2 as pb

CORRUPT_POLICIES = {"fail": pb.CORRUPT_POLICY_FAIL, "skip": pb.CORRUPT_POLICY_SKIP}
NULLS = {None: "", "refuse": "", "mask": "mask"}  # as the spec carries them ("": refuse)


def job_spec(dataset: str | Sequence[str], *, batch_size: int, shuffle: bool, seed: int, drop_last: bool,
             world_size: int, shuffle_block: int | None, transform: str | None,
             transform_args: Mapping[str, Any] | None, columns: Sequence[str] | None, on_corrupt: str,
             format: str | None, format_args: Mapping[str, Any] | None, seq_len: int | None, dtype: str | None,
             url_column: str | None, collate: str | None, pad_value: float, weights: str | None,
             bucket_by: str | None, bucket_window: int, nulls: str | None = None) -> pb.JobSpec:
    if on_corrupt not in CORRUPT_POLICIES:
        raise InvalidJobSpec(f"on_corrupt must be 'fail' or 'skip', got {on_corrupt!r}")
    if nulls not in NULLS:
        raise InvalidJobSpec(f"nulls must be 'refuse' or 'mask', got {nulls!r}")
    options = format_options(format_args, seq_len=seq_len, dtype=dtype, url_column=url_column)
    return pb.JobSpec(
        dataset=[dataset] if isinstance(dataset, str) else list(dataset), batch_size=batch_size, shuffle=shuffle,
        seed=seed, drop_last=drop_last, world_size=world_size, shuffle_block=shuffle_block or 0,
        transform=pb.TransformSpec(name=transform or "", args_json=json.dumps(dict(transform_args or {}))),
        columns=list(columns or ()), on_corrupt=CORRUPT_POLICIES[on_corrupt],
        format=format or "", format_args_json=json.dumps(options),
        collate=collate or "", pad_value=pad_value, weights=weights or "",
        bucket_by=bucket_by or "", bucket_window=bucket_window if bucket_by else 0,
        nulls=NULLS[nulls],
    )


def format_options(given: Mapping[str, Any] | None, **named: Any) -> dict[str, Any]:
    """The format's options: `given`, plus the named ones that were set."""
    args = dict(given or {})
    for key, value in named.items():
        if value is not None:
            if key in args and args[key] != value:
                raise InvalidJobSpec(f"{key}={value!r} and format_args[{key!r}]={args[key]!r} disagree")
            args[key] = value
    return args


__all__ = ["CORRUPT_POLICIES", "NULLS", "format_options", "job_spec"]
