"""The thin client: a DataLoader-shaped iterator over a shardstream service.

It never imports Ray; it needs grpcio, protobuf, numpy and torch.
"""

from shardstream.client.auth import Token
from shardstream.client.loader import RemoteLoader
from shardstream.client.loader_options import (
    DeliveryOptions,
    FormatOptions,
    OrderOptions,
    SecurityOptions,
)
from shardstream.client.stats import LoaderStats
from shardstream.client.tls import TLS
from shardstream.proto.errors import (
    BatchExceedsWindow,
    BatchTooLarge,
    CheckpointMismatch,
    CorruptSample,
    CredentialsError,
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
    StorageAccessDenied,
    StorageBusy,
    StreamProtocolError,
    TooManyJobs,
    TransformNotAllowed,
    Unauthenticated,
    UnknownTransform,
    UnreadableShard,
)
from shardstream.proto.mixture import Mixture, Source

__all__ = [
    "TLS",
    "BatchExceedsWindow",
    "BatchTooLarge",
    "CheckpointMismatch",
    "CorruptSample",
    "CredentialsError",
    "DatasetChanged",
    "DatasetNotAllowed",
    "DatasetNotFound",
    "DeadlineExceeded",
    "DeliveryOptions",
    "FormatOptions",
    "InvalidJobSpec",
    "JobNotFound",
    "JobSpecConflict",
    "LoaderStats",
    "Mixture",
    "OrderOptions",
    "PermissionDenied",
    "ProtocolMismatch",
    "RemoteLoader",
    "SchemaMismatch",
    "SecurityOptions",
    "ServiceUnavailable",
    "ShardstreamError",
    "Source",
    "StorageAccessDenied",
    "StorageBusy",
    "StreamProtocolError",
    "Token",
    "TooManyJobs",
    "TransformNotAllowed",
    "Unauthenticated",
    "UnknownTransform",
    "UnreadableShard",
]
