"""Errors that cross the wire, and the one table mapping them to gRPC codes.

The service raises these; the servicer boundary turns them into a gRPC status
whose details name the class (``shardstream-error`` trailing metadata) and
whose message names the cause. The client maps the status back to the same
class, so ``except DatasetNotFound`` works on either side of the wire.
Each class also subclasses the builtin that fits, so generic handlers
(``except ValueError``) keep working.
"""

from __future__ import annotations

import grpc

ERROR_METADATA_KEY = "shardstream-error"


class ShardstreamError(Exception):
    """Base of every shardstream error."""

    code: grpc.StatusCode = grpc.StatusCode.INTERNAL
    # True when the service raised it and said so; False for transport failures
    # (a reset connection, a dead process), which a client may retry.
    from_service: bool = False


class InvalidJobSpec(ShardstreamError, ValueError):
    """A job option is invalid: batch_size <= 0, rank >= world_size, a column the dataset lacks, ...
    The subclasses below name causes that are not an option of the job; each is still an
    InvalidJobSpec (INVALID_ARGUMENT), as they were raised before they had names of their own."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class UnknownTransform(InvalidJobSpec):
    """The transform name is neither built in nor importable."""


class CheckpointMismatch(InvalidJobSpec):
    """load_state_dict was given a state this loader cannot resume from: not a loader state of this
    version, or one taken with another job spec, dataset or global batch size (the message says which)."""


class CredentialsError(InvalidJobSpec):
    """The client's token or TLS files cannot be used: unreadable, empty, a token an authorization
    header cannot carry, a certificate without its key."""


class StreamProtocolError(InvalidJobSpec):
    """A message broke the wire protocol: a FetchBatches stream that does not open first, a want the
    stream cannot serve, batches out of order or missing, request bytes that do not parse. A client
    and a service of one release never do this: a bug, or a peer that is not shardstream."""


class BatchTooLarge(InvalidJobSpec):
    """A batch is larger than the service may send (its max_message_bytes)."""


class BatchExceedsWindow(BatchTooLarge):
    """A batch is larger than the rank's whole receive window (prefetch_bytes, bounded by the
    service's job_max_in_flight_bytes): it could never be received."""


class Unauthenticated(ShardstreamError, PermissionError):
    """The call carried no token, or one the service does not know (its auth_tokens_file)."""

    code = grpc.StatusCode.UNAUTHENTICATED


class PermissionDenied(ShardstreamError, PermissionError):
    """The caller may not do this: its identity's grants (a priority class, another identity's
    job), or the service's allowlists (the subclasses below)."""

    code = grpc.StatusCode.PERMISSION_DENIED


class TransformNotAllowed(PermissionDenied):
    """The transform's module is outside the service's (or the identity's) allowlist."""


class DatasetNotAllowed(PermissionDenied):
    """The dataset lies outside the prefixes this service (or the identity) may read."""


class DatasetNotFound(ShardstreamError, FileNotFoundError):
    """The dataset path, glob or a listed shard does not exist."""

    code = grpc.StatusCode.NOT_FOUND


class UnreadableShard(ShardstreamError, OSError):
    """A file of the dataset exists but cannot be read as its format: not Parquet (a tar, a token
    file, a manifest), truncated or corrupt, a value its format does not allow, a read the store
    failed. The message names the file."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class DatasetChanged(UnreadableShard):
    """A file of the dataset is not the one the job opened: rewritten, replaced or re-linked since;
    or, after a reconnect, the job the service opened again is not the one that was running.
    The message names what differs; opening the job again reads the new data."""


class StorageAccessDenied(UnreadableShard):
    """The store refused the service's own credentials for the dataset (not the caller's grants:
    those are PermissionDenied). The service's storage identity needs read access to it."""


class SchemaMismatch(ShardstreamError, ValueError):
    """Shards of one dataset disagree on their schema."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class CorruptSample(ShardstreamError, ValueError):
    """A sample failed to decode; the message names file and row."""

    code = grpc.StatusCode.DATA_LOSS


class JobNotFound(ShardstreamError, KeyError):
    """No job with this id is open on the service."""

    code = grpc.StatusCode.NOT_FOUND

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else ""


class JobSpecConflict(ShardstreamError, ValueError):
    """A rank joined a job with a spec that differs from the job's."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class ProtocolMismatch(ShardstreamError, ValueError):
    """Client and service speak different protocol versions."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class ServiceUnavailable(ShardstreamError, ConnectionError):
    """The service cannot be reached, or has no decoders."""

    code = grpc.StatusCode.UNAVAILABLE


class DecoderDraining(ServiceUnavailable):
    """A decode actor the scaling policy is giving back: it sent every batch it had accepted and
    ends the stream; the rank asks the other decoders for the rest (nothing is lost or repeated)."""


class DeadlineExceeded(ShardstreamError, TimeoutError):
    """A wait ran past its deadline."""

    code = grpc.StatusCode.DEADLINE_EXCEEDED


class StorageBusy(ShardstreamError, RuntimeError):
    """Too many earlier storage calls are still waiting on a store that does not answer."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class TooManyJobs(ShardstreamError, RuntimeError):
    """The service holds as many jobs as its max_jobs setting allows; idle ones are forgotten in time."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED


ERRORS: dict[str, type[ShardstreamError]] = {
    cls.__name__: cls
    for cls in (
        ShardstreamError,
        InvalidJobSpec,
        UnknownTransform,
        CheckpointMismatch,
        CredentialsError,
        StreamProtocolError,
        BatchTooLarge,
        BatchExceedsWindow,
        Unauthenticated,
        PermissionDenied,
        TransformNotAllowed,
        DatasetNotAllowed,
        DatasetNotFound,
        UnreadableShard,
        DatasetChanged,
        StorageAccessDenied,
        SchemaMismatch,
        CorruptSample,
        JobNotFound,
        JobSpecConflict,
        ProtocolMismatch,
        ServiceUnavailable,
        DecoderDraining,
        DeadlineExceeded,
        StorageBusy,
        TooManyJobs,
    )
}

# Client-side fallback when a status carries no class name (a proxy, or grpc itself).
_BY_CODE: dict[grpc.StatusCode, type[ShardstreamError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidJobSpec,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.NOT_FOUND: DatasetNotFound,
    grpc.StatusCode.DATA_LOSS: CorruptSample,
    grpc.StatusCode.UNAVAILABLE: ServiceUnavailable,
    grpc.StatusCode.CANCELLED: ServiceUnavailable,  # the service cancelled: it is shutting down
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
}


def from_status(code: grpc.StatusCode, message: str, class_name: str | None) -> ShardstreamError:
    """Rebuild the typed error a service raised from its gRPC status."""
    cls = ERRORS.get(class_name or "") or _BY_CODE.get(code, ShardstreamError)
    error = cls(message or code.name)
    error.from_service = class_name in ERRORS
    return error


def from_rpc_error(error: grpc.RpcError) -> ShardstreamError:
    """Map a grpc.RpcError (a Call) back to the typed error."""
    call: grpc.Call = error  # type: ignore[assignment]
    class_name = None
    for key, value in call.trailing_metadata() or ():
        if key == ERROR_METADATA_KEY:
            class_name = value if isinstance(value, str) else value.decode()
    return from_status(call.code(), call.details() or "", class_name)


__all__ = ["ERRORS", "ERROR_METADATA_KEY", *ERRORS, "from_rpc_error", "from_status"]
