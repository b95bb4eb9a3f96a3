"""The thin client: a DataLoader-shaped iterator over a shardstream service.

It never imports Ray; it needs grpcio, protobuf, numpy and torch.
"""

from shardstream.client.auth import Token
from shardstream.client.loader import RemoteLoader
from shardstream.client.stats import LoaderStats
from shardstream.client.tls import TLS
from shardstream.proto.errors import (
    CorruptSample,
    DatasetChanged,
    DatasetNotAllowed,
    DatasetNotFound,
    DeadlineExceeded,
    InvalidJobSpec,
    JobNotFound,
    JobSpecConflict,
    PermissionDenied,
    ProtocolMismatch,
    SchemaMismatch,
    ServiceUnavailable,
    ShardstreamError,
    StorageBusy,
    TooManyJobs,
    TransformNotAllowed,
    Unauthenticated,
    UnknownTransform,
    UnreadableShard,
)

__all__ = [
    "TLS",
    "CorruptSample",
    "DatasetChanged",
    "DatasetNotAllowed",
    "DatasetNotFound",
    "DeadlineExceeded",
    "InvalidJobSpec",
    "JobNotFound",
    "JobSpecConflict",
    "LoaderStats",
    "PermissionDenied",
    "ProtocolMismatch",
    "RemoteLoader",
    "SchemaMismatch",
    "ServiceUnavailable",
    "ShardstreamError",
    "StorageBusy",
    "Token",
    "TooManyJobs",
    "TransformNotAllowed",
    "Unauthenticated",
    "UnknownTransform",
    "UnreadableShard",
]
