"""The job spec, declared once: every option a job is opened with, in one frozen dataclass.

A job option is a field declared with `option()`: its type and default are the field's, and the
declaration says the rest (help text, group, the `pb.JobSpec` field it travels in, the service
limit that bounds it, where the reproducibility manifest records it). Everything else derives
from the declarations:

- the client's keywords, their docstring and signature (client/loader_options.py, loader.py);
- validation, the same on both sides (`JobOptions.__post_init__`): a loader refuses a bad
  option before it connects, the service refuses a bad message from any client;
- the proto conversion both ways (`to_proto`, `from_proto`);
- the one fingerprint (`fingerprint`): what must match to resume a checkpoint, and with the
  shape (world size, batch size) what names the job on the service;
- the service's request limits (control/spec_limits.py), the manifest (control/reproducibility.py)
  and what a decode actor is told (`DecodeJob.spec`, service/node_messages.py).

Adding an option: a field here, its field in loader.proto (`make proto`), and the code that
uses it. docs/architecture.md, "Adding a job option".
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from google.protobuf.descriptor import FieldDescriptor

from shardstream.proto.errors import InvalidJobSpec
from shardstream.proto.mixture import Mixture, check_mixture
from shardstream.proto.option_wire import CORRUPT_POLICIES, decode, encode, proto_field, set_field
from shardstream.proto.v1 import loader_pb2 as pb

GROUPS = ("", "order", "format")  # "": the flat keywords DataLoader users know
NULLS = ("", "mask")  # "": refuse (docs/formats.md, "Values and dtypes"); "refuse" is its keyword spelling
DEFAULT_BUCKET_WINDOW = 64  # batches, with bucket_by


@dataclass(frozen=True)
class Option:
    """What a job option's declaration says beside its type and default."""

    help: str
    group: str = ""  # GROUPS
    proto: str = ""  # its pb.JobSpec field ("transform.name": nested); "": folded into another option
    shape: bool = False  # may differ on resume (world size, batch size): outside the fingerprint
    limits: tuple[str, ...] = ()  # the service's RequestLimits bounding it (control/spec_limits.py)
    record: str = ""  # the manifest section recording it: "pipeline", "order" ("" : not recorded)
    recorded_when_set: bool = False  # recorded only when not its default (keeps older manifests' hashes)
    fold: str = ""  # a shorthand for a key of this option (format_args)
    # how the message carries it, beside as itself: "json" (an object's text), "policy" (an enum),
    # "optional" (a field with presence: unset is None)
    wire: str = ""
    # absent from the message at its default ("" for a JSON option), so that the fingerprints of
    # jobs without it stay those of before it (transform_args and format_args always send "{}")
    sent_when_set: bool = False
    check: Callable[[Any], str | None] | None = None  # the refusal's text for a bad value, or None


def option(default: Any, help: str, **declared: Any) -> Any:
    """A field of JobOptions (see the module docstring)."""
    return dataclasses.field(default=default, metadata={"option": Option(help, **declared)})


def _positive(name: str) -> Callable[[int], str | None]:
    return lambda v: None if v > 0 else f"{name} must be > 0, got {v}"


@dataclass(frozen=True)
class JobOptions:
    """Which samples each rank sees and how they look: everything a job is opened with."""

    dataset: tuple[str, ...] = option(
        (), "a directory, glob or file URL (any fsspec URL), or a list of them", proto="dataset",
        limits=("dataset_entries", "url_chars"),
        check=lambda v: None if all(v) else f"dataset has an empty entry: {list(v)}")
    batch_size: int = option(0, "samples per batch, as DataLoader's", proto="batch_size", shape=True,
                             limits=("batch_size",), record="order", check=_positive("batch_size"))
    shuffle: bool = option(True, "as DistributedSampler's", proto="shuffle", record="order")
    seed: int = option(0, "as DistributedSampler's: the order of epoch e comes from seed + e", proto="seed",
                       record="order")
    drop_last: bool = option(False, "as DataLoader's and DistributedSampler's", proto="drop_last", record="order")
    world_size: int = option(1, "ranks of the job; default torch.distributed's, else WORLD_SIZE, else 1",
                             proto="world_size", shape=True, limits=("world_size",), record="order",
                             check=_positive("world_size"))
    transform: str = option("", 'a built-in transform name ("image") or "module:factory"', proto="transform.name",
                            limits=("name_chars",), record="pipeline")
    transform_args: dict[str, Any] = option(  # noqa: RUF009 (a field declaration, as dataclasses.field)
        None, "keyword arguments for the transform",
        proto="transform.args_json", wire="json", limits=("args_bytes",), record="pipeline")
    columns: tuple[str, ...] = option((), "the columns to load (default: all)", proto="columns",
                                      limits=("columns", "name_chars"), record="pipeline",
                                      check=lambda v: f"columns has duplicates: {list(v)}"
                                      if len(set(v)) != len(v) else None)
    on_corrupt: str = option(
        "fail", '"fail" (default) or "skip" (replace a corrupt sample deterministically, and count it)',
        group="format", proto="on_corrupt", wire="policy", record="pipeline",
        check=lambda v: None if v in CORRUPT_POLICIES else f"on_corrupt must be 'fail' or 'skip', got {v!r}")
    shuffle_block: int = option(
        0, "0 (default): DistributedSampler's exact order. A number of samples: the block-shuffle order mode "
        "for datasets larger than the decoders' cache: row groups in a random order, then each run of this "
        "many samples shuffled among themselves (docs/order-modes.md). Deterministic from (seed, epoch), "
        "equal batches on every rank, resumable, but not DistributedSampler's order",
        group="order", proto="shuffle_block", limits=("shuffle_block",), record="order",
        check=lambda v: None if v >= 0 else f"shuffle_block must be >= 0 (0: the exact order), got {v}")
    weights: str = option(
        "", "a column of per-sample weights (>= 0): each epoch draws N samples with replacement, as "
        "WeightedRandomSampler(weights, N, generator=seeded(seed + epoch)), split across ranks as "
        "DistributedSampler splits its permutation (padding by wrapping, rank::world_size, drop_last as "
        "usual). shuffle has no effect with it",
        group="order", proto="weights", limits=("name_chars",), record="order")
    bucket_by: str = option(
        "", "a column giving each sample's length (a list column's lengths, or numbers): each rank's samples "
        "of an epoch are grouped into batches of similar length, bucket_window batches at a time, the "
        "batches of a window in a random order (from seed, epoch, rank). The samples a rank sees stay "
        'exactly DistributedSampler\'s; less padding with collate="pad" (docs/order-modes.md)',
        group="order", proto="bucket_by", limits=("name_chars",), record="order")
    bucket_window: int = option(
        0, f"batches per bucketing window (with bucket_by; default {DEFAULT_BUCKET_WINDOW})", group="order",
        proto="bucket_window", limits=("bucket_window",), record="order",
        check=lambda v: None if v >= 0 else f"bucket_window must be a number of batches > 0, got {v}")
    format: str = option(
        "", 'how to find sample i in the dataset\'s files (README, "Dataset formats"): "" picks Parquet, '
        'or WebDataset when every entry ends in .tar; "parquet", "tokens", "webdataset", "imagefolder", '
        '"manifest", "jsonl"', group="format", proto="format", limits=("name_chars",))
    format_args: dict[str, Any] = option(  # noqa: RUF009 (a field declaration, as dataclasses.field)
        None, "the format's options; seq_len, dtype (tokens) and url_column (manifest) may be given as "
        "keywords instead", group="format", proto="format_args_json", wire="json", limits=("args_bytes",))
    seq_len: int | None = option(None, "format_args' seq_len (tokens): tokens per sample", group="format",
                                 fold="format_args")
    dtype: str | None = option(None, "format_args' dtype (tokens): the token files' dtype", group="format",
                               fold="format_args")
    url_column: str | None = option(None, "format_args' url_column (manifest): the column of file URLs",
                                    group="format", fold="format_args")
    collate: str = option(
        "", 'how samples become a batch: "" stacks them (numbers and same-shape arrays to [B, ...] tensors, '
        'strings to list[str]); "pad" also pads variable-length values (list columns, lists or 1-D arrays '
        "from a transform) to the batch's longest with pad_value and adds <key>_lengths (int64 [B]); "
        '"package.module:function" is a user collate on the service (allowed like transforms)',
        group="format", proto="collate", limits=("name_chars",), record="pipeline")
    pad_value: float = option(
        0.0, 'what collate="pad" fills with', group="format", proto="pad_value", record="pipeline",
        check=lambda v: None if math.isfinite(v) else f"pad_value must be a finite number, got {v}")
    nulls: str = option(
        "", 'what a null in a column delivered without a transform becomes (docs/formats.md, "Values and '
        'dtypes"). "" or "refuse" (default): a column of integers, bools, timestamps, strings or lists '
        "that holds a null is refused when the job opens (InvalidJobSpec naming file, column and row); "
        "floats' nulls arrive as NaN, as pyarrow's to_numpy gives them. \"mask\": every column is "
        'delivered, a null as 0, False, "" or an empty list, with a bool <column>_mask tensor [B] that is '
        "True where the row holds a value; values are never converted to float",
        group="format", proto="nulls", record="pipeline", recorded_when_set=True,
        check=lambda v: None if v in NULLS else f"nulls must be 'refuse' or 'mask', got {v!r}")

    augment_seed: int | None = option(
        None, "the seed of per-sample augmentation (a transform's random crop and flip come from "
        "(augment_seed, epoch, sample index)); None: seed. A new augment_seed draws new augmentations "
        "in the same order; a new seed with the same augment_seed, a new order of the same augmentations",
        group="order", proto="augment_seed", wire="optional", record="pipeline", recorded_when_set=True)

    mixture: dict[str, Any] = option(  # noqa: RUF009 (a field declaration, as dataclasses.field)
        None, "several datasets in one job, each drawn at its weight (a Mixture, given as the dataset; "
        "docs/mixtures.md)", proto="mixture_json", wire="json", sent_when_set=True, limits=("args_bytes",),
        record="order", recorded_when_set=True, check=check_mixture)

    def __post_init__(self) -> None:
        set_ = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731
        set_("transform_args", dict(self.transform_args or {}))
        set_("format_args", dict(self.format_args or {}))
        set_("mixture", dict(self.mixture or {}))
        for name, fold in FOLDED.items():
            value = getattr(self, name)
            if value is not None:
                args = getattr(self, fold)
                if name in args and args[name] != value:
                    raise InvalidJobSpec(f"{name}={value!r} and {fold}[{name!r}]={args[name]!r} disagree")
                args[name] = value
        check_declared(self, typed=True)
        for refusal in _together(self):
            raise InvalidJobSpec(refusal)

    @classmethod
    def given(cls, **keywords: Any) -> JobOptions:
        """The options as a loader's keywords give them: None for "the default", a string for one
        dataset entry, any sequence or mapping, "refuse" for nulls' default, bucket_window's default
        only with bucket_by."""
        unknown = set(keywords) - set(DECLARED)
        if unknown:
            raise TypeError(f"unknown job options: {', '.join(sorted(unknown))}")
        values = {k: v for k, v in keywords.items() if v is not None or k in FOLDED}
        if isinstance(values.get("dataset"), str):
            values["dataset"] = (values["dataset"],)
        if isinstance(values.get("dataset"), Mixture):
            values["mixture"] = values.pop("dataset")
        if isinstance(values.get("mixture"), Mixture):
            values["mixture"] = values["mixture"].as_option()
        for name in ("dataset", "columns"):
            if name in values:
                values[name] = tuple(values[name])
        if values.get("nulls") == "refuse":
            values["nulls"] = ""
        if "bucket_window" not in values and values.get("bucket_by"):
            values["bucket_window"] = DEFAULT_BUCKET_WINDOW
        elif not values.get("bucket_by") and values.get("bucket_window") == DEFAULT_BUCKET_WINDOW:
            del values["bucket_window"]  # the keyword's old default, given without bucket_by: unused
        return cls(**values)

    @classmethod
    def from_proto(cls, msg: pb.JobSpec) -> JobOptions:
        """The options a message carries (its size bounds are the service's: spec_limits.py)."""
        values: dict[str, Any] = {}
        for name, declared in DECLARED.items():
            if declared.wire == "optional" and not msg.HasField(declared.proto):
                continue  # unset: the default
            if declared.proto:
                values[name] = decode(name, declared.wire, proto_field(msg, declared.proto))
        return cls(**values)

    def to_proto(self, canonical: bool = False) -> pb.JobSpec:
        """The message; `canonical`: JSON options in one spelling (sorted keys, no spaces)."""
        msg = pb.JobSpec()
        for name, declared in DECLARED.items():
            value = getattr(self, name)
            if declared.proto and not (declared.wire == "optional" and value is None) \
                    and not (declared.sent_when_set and value == DEFAULTS[name]):
                set_field(msg, declared.proto, encode(declared.wire, value, canonical))
        return msg

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.to_proto())

    @property
    def sample_seed(self) -> int:
        """The seed of each sample's augmentation: augment_seed, else seed."""
        return self.seed if self.augment_seed is None else self.augment_seed

    @property
    def identity(self) -> str:
        """What names a job on the service: the fingerprint of its canonical message (two spellings
        of the same transform_args are one job), with the shape."""
        return f"{fingerprint(self.to_proto(canonical=True))}-{self.world_size}x{self.batch_size}"

    def recorded(self, section: str) -> dict[str, Any]:
        """The options a manifest section records (control/reproducibility.py)."""
        return {name: _recorded(getattr(self, name)) for name, declared in DECLARED.items()
                if declared.record == section
                and not (declared.recorded_when_set and getattr(self, name) == DEFAULTS[name])}

    def differences(self, other: JobOptions) -> list[str]:
        """The options that differ, for conflict errors."""
        return [f"{name}: {getattr(self, name)!r} != {getattr(other, name)!r}" for name in DECLARED
                if getattr(self, name) != getattr(other, name)]


def check_declared(options: Any, typed: bool = False) -> None:
    """InvalidJobSpec for the first option of `options` (a class of `option()` fields) whose value
    its declaration's check refuses; `typed`: a value of another type than declared, first."""
    for f in dataclasses.fields(options):
        value, check = getattr(options, f.name), f.metadata["option"].check
        refusal = ((_wrong_type(f.name, value) or _past_its_field(f.name, value)) if typed else None) or \
            (check(value) if check else None)
        if refusal:
            raise InvalidJobSpec(refusal)


def fingerprint(msg: pb.JobSpec) -> str:
    """The job's one fingerprint: its message without the shape (world size, batch size), so a
    checkpoint resumes at another world size with the same global batch. An option left at its
    default is absent from the message (proto3), so adding an option does not change the
    fingerprint of jobs that do not use it, and older checkpoints still resume."""
    shape_free = pb.JobSpec()
    shape_free.CopyFrom(msg)
    for declared in DECLARED.values():
        if declared.shape:
            shape_free.ClearField(declared.proto)
    return hashlib.sha256(shape_free.SerializeToString(deterministic=True)).hexdigest()[:16]


def _together(spec: JobOptions) -> list[str]:
    """Refusals of options that do not go together."""
    refusals = []
    if not spec.dataset and not spec.mixture:
        refusals.append("dataset is empty: give a directory, a glob or a list of files (or a Mixture)")
    if spec.mixture:
        refusals.extend(f"a Mixture names each source's {name} itself: leave the job's {name} out"
                        for name in ("dataset", "format", "format_args") if getattr(spec, name))
        if spec.weights:
            refusals.append("weights and a Mixture are two ways to weigh samples: choose one")
        if spec.shuffle_block:
            refusals.append("shuffle_block and a Mixture are two orders of an epoch: choose one")
    if spec.shuffle_block and not spec.shuffle:
        refusals.append("shuffle_block is a way to shuffle: set shuffle=True with it, or leave it out")
    if spec.weights and spec.shuffle_block:
        refusals.append("weights and shuffle_block are two ways to order an epoch: choose one")
    if spec.bucket_by and not spec.bucket_window:
        refusals.append(f"bucket_window must be a number of batches > 0 with bucket_by, got {spec.bucket_window}")
    if spec.bucket_window and not spec.bucket_by:
        refusals.append("bucket_window needs bucket_by, the column that gives each sample's length")
    return refusals


# ------------------------------------------------------------------ the declarations, read back

DECLARED: dict[str, Option] = {f.name: f.metadata["option"] for f in dataclasses.fields(JobOptions)}
FOLDED = {name: d.fold for name, d in DECLARED.items() if d.fold}
# each option's value when not given (a JSON object option's None is {}, as __post_init__ makes it)
DEFAULTS: dict[str, Any] = {f.name: {} if f.metadata["option"].wire == "json" else f.default for f in dataclasses.fields(JobOptions)}


_KINDS = {name: hint for name, hint in typing.get_type_hints(JobOptions).items() if name in DECLARED}


def _wrong_type(name: str, value: Any) -> str | None:
    """The refusal of a value of the wrong type (a bool is not a number here)."""
    hint = _KINDS[name]
    allowed = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    if value is None and type(None) in allowed:
        return None
    for kind in allowed:
        base = typing.get_origin(kind) or kind
        if base is tuple and isinstance(value, tuple) and all(isinstance(v, str) for v in value):
            return None
        if base is dict and isinstance(value, Mapping):
            return None
        numbers = (int, float) if base is float else (int,) if base is int else ()
        if (isinstance(value, numbers) and not isinstance(value, bool)) or (base in (str, bool)
                                                                            and isinstance(value, base)):
            return None
    names = " or ".join("strings" if (typing.get_origin(k) or k) is tuple else getattr(k, "__name__", str(k))
                        for k in allowed if k is not type(None))
    return f"{name} must be {names}, got {value!r}"


_FIELD_BITS = {FieldDescriptor.TYPE_INT32: 32, FieldDescriptor.TYPE_INT64: 64}


def _past_its_field(name: str, value: Any) -> str | None:
    """The refusal of a whole number its JobSpec field cannot carry (int32, int64)."""
    path = DECLARED[name].proto
    if not isinstance(value, int) or isinstance(value, bool) or not path or "." in path:
        return None
    bits = _FIELD_BITS.get(pb.JobSpec.DESCRIPTOR.fields_by_name[path].type)
    if bits is None or -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
        return None
    return f"{name} {value} does not fit the int{bits} it travels as ({-(2 ** (bits - 1))}..{2 ** (bits - 1) - 1})"


def _recorded(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else dict(value) if isinstance(value, Mapping) else value


__all__ = ["DECLARED", "DEFAULT_BUCKET_WINDOW", "GROUPS", "NULLS", "JobOptions", "Option", "check_declared",
           "fingerprint", "option"]
