"""Typed errors across the wire: class <-> status code, builtin bases, from_status/from_rpc_error."""

from __future__ import annotations

from collections.abc import Sequence

import grpc
import pytest

from shardstream.proto import errors as E
from shardstream.proto.errors import ERROR_METADATA_KEY, ERRORS, from_rpc_error, from_status

BUILTIN_BASE: dict[type[E.ShardstreamError], type[BaseException]] = {
    E.InvalidJobSpec: ValueError,
    E.UnknownTransform: ValueError,
    E.CheckpointMismatch: ValueError,
    E.CredentialsError: ValueError,
    E.StreamProtocolError: ValueError,
    E.BatchTooLarge: ValueError,
    E.BatchExceedsWindow: ValueError,
    E.Unauthenticated: PermissionError,
    E.PermissionDenied: PermissionError,
    E.TransformNotAllowed: PermissionError,
    E.DatasetNotAllowed: PermissionError,
    E.DatasetNotFound: FileNotFoundError,
    E.UnreadableShard: OSError,
    E.DatasetChanged: OSError,
    E.StorageAccessDenied: OSError,
    E.SchemaMismatch: ValueError,
    E.CorruptSample: ValueError,
    E.JobNotFound: KeyError,
    E.JobSpecConflict: ValueError,
    E.ProtocolMismatch: ValueError,
    E.ServiceUnavailable: ConnectionError,
    E.DecoderDraining: ConnectionError,
    E.DeadlineExceeded: TimeoutError,
    E.StorageBusy: RuntimeError,
    E.TooManyJobs: RuntimeError,
}

CODES: dict[type[E.ShardstreamError], grpc.StatusCode] = {
    E.ShardstreamError: grpc.StatusCode.INTERNAL,
    E.InvalidJobSpec: grpc.StatusCode.INVALID_ARGUMENT,
    E.UnknownTransform: grpc.StatusCode.INVALID_ARGUMENT,
    E.CheckpointMismatch: grpc.StatusCode.INVALID_ARGUMENT,
    E.CredentialsError: grpc.StatusCode.INVALID_ARGUMENT,
    E.StreamProtocolError: grpc.StatusCode.INVALID_ARGUMENT,
    E.BatchTooLarge: grpc.StatusCode.INVALID_ARGUMENT,
    E.BatchExceedsWindow: grpc.StatusCode.INVALID_ARGUMENT,
    E.Unauthenticated: grpc.StatusCode.UNAUTHENTICATED,
    E.PermissionDenied: grpc.StatusCode.PERMISSION_DENIED,
    E.TransformNotAllowed: grpc.StatusCode.PERMISSION_DENIED,
    E.DatasetNotAllowed: grpc.StatusCode.PERMISSION_DENIED,
    E.DatasetNotFound: grpc.StatusCode.NOT_FOUND,
    E.UnreadableShard: grpc.StatusCode.FAILED_PRECONDITION,
    E.DatasetChanged: grpc.StatusCode.FAILED_PRECONDITION,
    E.StorageAccessDenied: grpc.StatusCode.FAILED_PRECONDITION,
    E.SchemaMismatch: grpc.StatusCode.FAILED_PRECONDITION,
    E.CorruptSample: grpc.StatusCode.DATA_LOSS,
    E.JobNotFound: grpc.StatusCode.NOT_FOUND,
    E.JobSpecConflict: grpc.StatusCode.FAILED_PRECONDITION,
    E.ProtocolMismatch: grpc.StatusCode.FAILED_PRECONDITION,
    E.ServiceUnavailable: grpc.StatusCode.UNAVAILABLE,
    E.DecoderDraining: grpc.StatusCode.UNAVAILABLE,
    E.DeadlineExceeded: grpc.StatusCode.DEADLINE_EXCEEDED,
    E.StorageBusy: grpc.StatusCode.RESOURCE_EXHAUSTED,
    E.TooManyJobs: grpc.StatusCode.RESOURCE_EXHAUSTED,
}

ALL = sorted(ERRORS.values(), key=lambda c: c.__name__)


def test_registry_lists_every_error_class() -> None:
    assert set(ERRORS.values()) == set(CODES)
    assert all(ERRORS[name].__name__ == name for name in ERRORS)
    assert set(ERRORS) <= set(E.__all__)


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
def test_round_trip_by_class_name(cls: type[E.ShardstreamError]) -> None:
    message = f"{cls.__name__}: shard 'gs://b/part-1.parquet' row 7"
    err = cls(message)
    back = from_status(err.code, str(err), cls.__name__)
    assert type(back) is cls
    assert str(back) == message
    assert back.code == CODES[cls]


@pytest.mark.parametrize("cls", sorted(BUILTIN_BASE, key=lambda c: c.__name__), ids=lambda c: c.__name__)
def test_each_error_is_also_the_matching_builtin(cls: type[E.ShardstreamError]) -> None:
    err = cls("boom")
    assert isinstance(err, BUILTIN_BASE[cls])
    assert isinstance(err, E.ShardstreamError)
    assert str(err) == "boom"


@pytest.mark.parametrize(("cls", "base"), [
    (E.UnknownTransform, E.InvalidJobSpec),
    (E.CheckpointMismatch, E.InvalidJobSpec),
    (E.CredentialsError, E.InvalidJobSpec),
    (E.StreamProtocolError, E.InvalidJobSpec),
    (E.BatchTooLarge, E.InvalidJobSpec),
    (E.BatchExceedsWindow, E.BatchTooLarge),
    (E.DatasetChanged, E.UnreadableShard),
    (E.StorageAccessDenied, E.UnreadableShard),
], ids=lambda c: c.__name__)
def test_each_cause_is_still_the_class_raised_for_it_before(cls: type[E.ShardstreamError],
                                                            base: type[E.ShardstreamError]) -> None:
    """`except InvalidJobSpec` and `except UnreadableShard` keep catching what they caught."""
    assert issubclass(cls, base)


def test_the_allowlist_refusals_are_permission_denied() -> None:
    assert issubclass(E.TransformNotAllowed, E.PermissionDenied)
    assert issubclass(E.DatasetNotAllowed, E.PermissionDenied)
    assert not issubclass(E.Unauthenticated, E.PermissionDenied)


@pytest.mark.parametrize(("code", "cls"), [
    (grpc.StatusCode.INVALID_ARGUMENT, E.InvalidJobSpec),
    (grpc.StatusCode.PERMISSION_DENIED, E.PermissionDenied),
    (grpc.StatusCode.UNAUTHENTICATED, E.Unauthenticated),
    (grpc.StatusCode.NOT_FOUND, E.DatasetNotFound),
    (grpc.StatusCode.DATA_LOSS, E.CorruptSample),
    (grpc.StatusCode.UNAVAILABLE, E.ServiceUnavailable),
    (grpc.StatusCode.DEADLINE_EXCEEDED, E.DeadlineExceeded),
    (grpc.StatusCode.INTERNAL, E.ShardstreamError),
    (grpc.StatusCode.FAILED_PRECONDITION, E.ShardstreamError),
    (grpc.StatusCode.UNKNOWN, E.ShardstreamError),
])
@pytest.mark.parametrize("class_name", [None, "", "NotAShardstreamError"])
def test_fallback_by_code_when_the_class_name_is_missing_or_unknown(
        code: grpc.StatusCode, cls: type[E.ShardstreamError], class_name: str | None) -> None:
    err = from_status(code, "why", class_name)
    assert type(err) is cls
    assert str(err) == "why"


def test_class_name_wins_over_code() -> None:
    err = from_status(grpc.StatusCode.NOT_FOUND, "no job j1", "JobNotFound")
    assert type(err) is E.JobNotFound
    assert str(err) == "no job j1"


def test_empty_message_falls_back_to_the_code_name() -> None:
    assert str(from_status(grpc.StatusCode.UNAVAILABLE, "", None)) == "UNAVAILABLE"


class FakeCall(grpc.RpcError):
    """What a failed call looks like to the client, without a server."""

    def __init__(self, code: grpc.StatusCode, details: str | None,
                 metadata: Sequence[tuple[str, str | bytes]] | None) -> None:
        self._code, self._details, self._metadata = code, details, metadata

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str | None:
        return self._details

    def trailing_metadata(self) -> Sequence[tuple[str, str | bytes]] | None:
        return self._metadata


@pytest.mark.parametrize("value", ["SchemaMismatch", b"SchemaMismatch"])
def test_from_rpc_error_reads_the_class_from_trailing_metadata(value: str | bytes) -> None:
    call = FakeCall(grpc.StatusCode.FAILED_PRECONDITION, "shards differ",
                    [("other", "x"), (ERROR_METADATA_KEY, value)])
    err = from_rpc_error(call)
    assert type(err) is E.SchemaMismatch
    assert str(err) == "shards differ"


def test_from_rpc_error_without_metadata_or_details() -> None:
    err = from_rpc_error(FakeCall(grpc.StatusCode.DEADLINE_EXCEEDED, None, None))
    assert type(err) is E.DeadlineExceeded
    assert str(err) == "DEADLINE_EXCEEDED"
