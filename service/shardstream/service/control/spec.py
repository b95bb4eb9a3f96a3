"""The job spec as a domain object: validated, fingerprinted, comparable.

Everything that decides which samples a rank sees and how they look lives
here; the fingerprint of it names the job's plan on every service instance.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, fields
from typing import Any

from shardstream.proto.errors import InvalidJobSpec
from shardstream.proto.v1 import loader_pb2 as pb
from shardstream.service.control.spec_limits import check_job_message
from shardstream.service.limits import DEFAULT_LIMITS, RequestLimits

CORRUPT_POLICIES = {pb.CORRUPT_POLICY_FAIL: "fail", pb.CORRUPT_POLICY_SKIP: "skip"}
NULLS = ("", "mask")  # docs/formats.md, "Values and dtypes"


@dataclass(frozen=True)
class JobSpec:
    dataset: tuple[str, ...]
    batch_size: int
    shuffle: bool
    seed: int
    drop_last: bool
    world_size: int
    transform: str = ""
    transform_args: str = "{}"  # canonical JSON
    columns: tuple[str, ...] = ()
    on_corrupt: str = "fail"
    shuffle_block: int = 0  # 0: DistributedSampler's order; > 0: block shuffle (plan.py)
    format: str = ""  # "": Parquet, or WebDataset for .tar names (formats/)
    format_args: str = "{}"  # canonical JSON
    collate: str = ""  # "", "pad" or "module:function" (transforms/collate.py)
    pad_value: float = 0.0
    weights: str = ""  # a column of per-sample weights: weighted sampling (per_sample.py)
    bucket_by: str = ""  # a column of lengths: batches of similar length (plan.py)
    bucket_window: int = 0  # in batches
    nulls: str = ""  # "": refuse nulls a plain column cannot hold, "mask": deliver them with <column>_mask

    def __post_init__(self) -> None:
        if not self.dataset or any(not d for d in self.dataset):
            raise InvalidJobSpec("dataset is empty: give a directory, a glob or a list of files")
        if self.batch_size <= 0:
            raise InvalidJobSpec(f"batch_size must be > 0, got {self.batch_size}")
        if self.world_size <= 0:
            raise InvalidJobSpec(f"world_size must be > 0, got {self.world_size}")
        if self.on_corrupt not in CORRUPT_POLICIES.values():
            raise InvalidJobSpec(f"on_corrupt must be 'fail' or 'skip', got {self.on_corrupt!r}")
        if self.shuffle_block < 0:
            raise InvalidJobSpec(f"shuffle_block must be >= 0 (0: the exact order), got {self.shuffle_block}")
        if self.shuffle_block and not self.shuffle:
            raise InvalidJobSpec("shuffle_block is a way to shuffle: set shuffle=True with it, or leave it out")
        if self.weights and self.shuffle_block:
            raise InvalidJobSpec("weights and shuffle_block are two ways to order an epoch: choose one")
        if self.bucket_window < 0 or (self.bucket_by and not self.bucket_window):
            raise InvalidJobSpec(f"bucket_window must be a number of batches > 0 with bucket_by, got {self.bucket_window}")
        if self.bucket_window and not self.bucket_by:
            raise InvalidJobSpec("bucket_window needs bucket_by, the column that gives each sample's length")
        if not math.isfinite(self.pad_value):
            raise InvalidJobSpec(f"pad_value must be a finite number, got {self.pad_value}")
        if self.nulls not in NULLS:
            raise InvalidJobSpec(f"nulls must be '' (refuse) or 'mask', got {self.nulls!r}")
        if len(set(self.columns)) != len(self.columns):
            raise InvalidJobSpec(f"columns has duplicates: {list(self.columns)}")

    @classmethod
    def from_proto(cls, msg: pb.JobSpec, limits: RequestLimits = DEFAULT_LIMITS) -> JobSpec:
        check_job_message(msg, limits)  # the service's bounds, before anything is parsed (spec_limits.py)
        if msg.on_corrupt not in CORRUPT_POLICIES:
            raise InvalidJobSpec(f"unknown on_corrupt policy {msg.on_corrupt}")
        return cls(
            dataset=tuple(msg.dataset),
            batch_size=msg.batch_size,
            shuffle=msg.shuffle,
            seed=msg.seed,
            drop_last=msg.drop_last,
            world_size=msg.world_size,
            transform=msg.transform.name,
            transform_args=_canonical_object(msg.transform.args_json, "transform args"),
            columns=tuple(msg.columns),
            on_corrupt=CORRUPT_POLICIES[msg.on_corrupt],
            shuffle_block=msg.shuffle_block,
            format=msg.format,
            format_args=_canonical_object(msg.format_args_json, "format args"),
            collate=msg.collate,
            pad_value=msg.pad_value,
            weights=msg.weights,
            bucket_by=msg.bucket_by,
            bucket_window=msg.bucket_window,
            nulls=msg.nulls,
        )

    @property
    def transform_kwargs(self) -> dict[str, Any]:
        return dict(json.loads(self.transform_args))

    @property
    def fingerprint(self) -> str:
        fields_ = asdict(self)
        later = (("shuffle_block", 0), ("format", ""), ("format_args", "{}"), ("collate", ""), ("pad_value", 0.0),
                 ("weights", ""), ("bucket_by", ""), ("bucket_window", 0), ("nulls", ""))
        for name, default in later:
            if fields_[name] == default:  # the fingerprint jobs had before these fields
                del fields_[name]
        blob = json.dumps(fields_, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def differences(self, other: JobSpec) -> list[str]:
        """Human-readable field differences, for conflict errors."""
        return [
            f"{f.name}: {getattr(self, f.name)!r} != {getattr(other, f.name)!r}"
            for f in fields(self)
            if getattr(self, f.name) != getattr(other, f.name)
        ]


def _canonical_object(text: str, what: str) -> str:
    """A JSON object in canonical form (sorted keys, no spaces); "" is {}."""
    try:
        parsed = json.loads(text or "{}")
    except (ValueError, RecursionError) as exc:  # ValueError: JSONDecodeError, or an integer of >4300 digits
        raise InvalidJobSpec(f"{what} are not valid JSON: {exc}") from None
    if not isinstance(parsed, dict):
        raise InvalidJobSpec(f"{what} must be a JSON object")
    return json.dumps(parsed, sort_keys=True, separators=(",", ":"))


__all__ = ["JobSpec"]
