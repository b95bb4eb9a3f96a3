from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CorruptPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CORRUPT_POLICY_FAIL: _ClassVar[CorruptPolicy]
    CORRUPT_POLICY_SKIP: _ClassVar[CorruptPolicy]
CORRUPT_POLICY_FAIL: CorruptPolicy
CORRUPT_POLICY_SKIP: CorruptPolicy

class FetchOpen(_message.Message):
    __slots__ = ("protocol_version", "job_id", "epoch", "rank", "bulk")
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    BULK_FIELD_NUMBER: _ClassVar[int]
    protocol_version: int
    job_id: str
    epoch: int
    rank: int
    bulk: bool
    def __init__(self, protocol_version: _Optional[int] = ..., job_id: _Optional[str] = ..., epoch: _Optional[int] = ..., rank: _Optional[int] = ..., bulk: _Optional[bool] = ...) -> None: ...

class Want(_message.Message):
    __slots__ = ("step", "max_bytes", "slot", "bulk", "data_stall")
    STEP_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    SLOT_FIELD_NUMBER: _ClassVar[int]
    BULK_FIELD_NUMBER: _ClassVar[int]
    DATA_STALL_FIELD_NUMBER: _ClassVar[int]
    step: int
    max_bytes: int
    slot: str
    bulk: bool
    data_stall: float
    def __init__(self, step: _Optional[int] = ..., max_bytes: _Optional[int] = ..., slot: _Optional[str] = ..., bulk: _Optional[bool] = ..., data_stall: _Optional[float] = ...) -> None: ...

class FetchControl(_message.Message):
    __slots__ = ("open", "want")
    OPEN_FIELD_NUMBER: _ClassVar[int]
    WANT_FIELD_NUMBER: _ClassVar[int]
    open: FetchOpen
    want: Want
    def __init__(self, open: _Optional[_Union[FetchOpen, _Mapping]] = ..., want: _Optional[_Union[Want, _Mapping]] = ...) -> None: ...

class TransformSpec(_message.Message):
    __slots__ = ("name", "args_json")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGS_JSON_FIELD_NUMBER: _ClassVar[int]
    name: str
    args_json: str
    def __init__(self, name: _Optional[str] = ..., args_json: _Optional[str] = ...) -> None: ...

class JobSpec(_message.Message):
    __slots__ = ("dataset", "batch_size", "shuffle", "seed", "drop_last", "world_size", "transform", "columns", "on_corrupt", "shuffle_block", "format", "format_args_json", "collate", "pad_value", "weights", "bucket_by", "bucket_window", "nulls", "augment_seed", "mixture_json")
    DATASET_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    SHUFFLE_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    DROP_LAST_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    TRANSFORM_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    ON_CORRUPT_FIELD_NUMBER: _ClassVar[int]
    SHUFFLE_BLOCK_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    FORMAT_ARGS_JSON_FIELD_NUMBER: _ClassVar[int]
    COLLATE_FIELD_NUMBER: _ClassVar[int]
    PAD_VALUE_FIELD_NUMBER: _ClassVar[int]
    WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    BUCKET_BY_FIELD_NUMBER: _ClassVar[int]
    BUCKET_WINDOW_FIELD_NUMBER: _ClassVar[int]
    NULLS_FIELD_NUMBER: _ClassVar[int]
    AUGMENT_SEED_FIELD_NUMBER: _ClassVar[int]
    MIXTURE_JSON_FIELD_NUMBER: _ClassVar[int]
    dataset: _containers.RepeatedScalarFieldContainer[str]
    batch_size: int
    shuffle: bool
    seed: int
    drop_last: bool
    world_size: int
    transform: TransformSpec
    columns: _containers.RepeatedScalarFieldContainer[str]
    on_corrupt: CorruptPolicy
    shuffle_block: int
    format: str
    format_args_json: str
    collate: str
    pad_value: float
    weights: str
    bucket_by: str
    bucket_window: int
    nulls: str
    augment_seed: int
    mixture_json: str
    def __init__(self, dataset: _Optional[_Iterable[str]] = ..., batch_size: _Optional[int] = ..., shuffle: _Optional[bool] = ..., seed: _Optional[int] = ..., drop_last: _Optional[bool] = ..., world_size: _Optional[int] = ..., transform: _Optional[_Union[TransformSpec, _Mapping]] = ..., columns: _Optional[_Iterable[str]] = ..., on_corrupt: _Optional[_Union[CorruptPolicy, str]] = ..., shuffle_block: _Optional[int] = ..., format: _Optional[str] = ..., format_args_json: _Optional[str] = ..., collate: _Optional[str] = ..., pad_value: _Optional[float] = ..., weights: _Optional[str] = ..., bucket_by: _Optional[str] = ..., bucket_window: _Optional[int] = ..., nulls: _Optional[str] = ..., augment_seed: _Optional[int] = ..., mixture_json: _Optional[str] = ...) -> None: ...

class OpenJobRequest(_message.Message):
    __slots__ = ("protocol_version", "job_name", "spec", "rank", "priority")
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    JOB_NAME_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    protocol_version: int
    job_name: str
    spec: JobSpec
    rank: int
    priority: str
    def __init__(self, protocol_version: _Optional[int] = ..., job_name: _Optional[str] = ..., spec: _Optional[_Union[JobSpec, _Mapping]] = ..., rank: _Optional[int] = ..., priority: _Optional[str] = ...) -> None: ...

class OpenJobResponse(_message.Message):
    __slots__ = ("job_id", "spec_fingerprint", "dataset_fingerprint", "num_samples", "samples_per_rank", "batches_per_rank", "num_files", "sources")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SPEC_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    DATASET_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    NUM_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_PER_RANK_FIELD_NUMBER: _ClassVar[int]
    BATCHES_PER_RANK_FIELD_NUMBER: _ClassVar[int]
    NUM_FILES_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    spec_fingerprint: str
    dataset_fingerprint: str
    num_samples: int
    samples_per_rank: int
    batches_per_rank: int
    num_files: int
    sources: _containers.RepeatedCompositeFieldContainer[MixtureSource]
    def __init__(self, job_id: _Optional[str] = ..., spec_fingerprint: _Optional[str] = ..., dataset_fingerprint: _Optional[str] = ..., num_samples: _Optional[int] = ..., samples_per_rank: _Optional[int] = ..., batches_per_rank: _Optional[int] = ..., num_files: _Optional[int] = ..., sources: _Optional[_Iterable[_Union[MixtureSource, _Mapping]]] = ...) -> None: ...

class MixtureSource(_message.Message):
    __slots__ = ("name", "first_sample", "num_samples", "samples_served", "tokens_served")
    NAME_FIELD_NUMBER: _ClassVar[int]
    FIRST_SAMPLE_FIELD_NUMBER: _ClassVar[int]
    NUM_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_SERVED_FIELD_NUMBER: _ClassVar[int]
    TOKENS_SERVED_FIELD_NUMBER: _ClassVar[int]
    name: str
    first_sample: int
    num_samples: int
    samples_served: int
    tokens_served: int
    def __init__(self, name: _Optional[str] = ..., first_sample: _Optional[int] = ..., num_samples: _Optional[int] = ..., samples_served: _Optional[int] = ..., tokens_served: _Optional[int] = ...) -> None: ...

class ListDecodersRequest(_message.Message):
    __slots__ = ("protocol_version", "job_id")
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    protocol_version: int
    job_id: str
    def __init__(self, protocol_version: _Optional[int] = ..., job_id: _Optional[str] = ...) -> None: ...

class ListDecodersResponse(_message.Message):
    __slots__ = ("batch_servers", "max_window_bytes")
    BATCH_SERVERS_FIELD_NUMBER: _ClassVar[int]
    MAX_WINDOW_BYTES_FIELD_NUMBER: _ClassVar[int]
    batch_servers: _containers.RepeatedScalarFieldContainer[str]
    max_window_bytes: int
    def __init__(self, batch_servers: _Optional[_Iterable[str]] = ..., max_window_bytes: _Optional[int] = ...) -> None: ...

class GetManifestRequest(_message.Message):
    __slots__ = ("protocol_version", "job_id")
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    protocol_version: int
    job_id: str
    def __init__(self, protocol_version: _Optional[int] = ..., job_id: _Optional[str] = ...) -> None: ...

class GetManifestResponse(_message.Message):
    __slots__ = ("manifest_json",)
    MANIFEST_JSON_FIELD_NUMBER: _ClassVar[int]
    manifest_json: str
    def __init__(self, manifest_json: _Optional[str] = ...) -> None: ...

class Tensor(_message.Message):
    __slots__ = ("name", "dtype", "shape", "data")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    name: str
    dtype: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    data: bytes
    def __init__(self, name: _Optional[str] = ..., dtype: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., data: _Optional[bytes] = ...) -> None: ...

class Batch(_message.Message):
    __slots__ = ("epoch", "rank", "step", "tensors", "sample_indices", "replaced_samples", "shared", "bulk_offer", "bulk_size", "needs_room")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    TENSORS_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_INDICES_FIELD_NUMBER: _ClassVar[int]
    REPLACED_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    SHARED_FIELD_NUMBER: _ClassVar[int]
    BULK_OFFER_FIELD_NUMBER: _ClassVar[int]
    BULK_SIZE_FIELD_NUMBER: _ClassVar[int]
    NEEDS_ROOM_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    rank: int
    step: int
    tensors: _containers.RepeatedCompositeFieldContainer[Tensor]
    sample_indices: _containers.RepeatedScalarFieldContainer[int]
    replaced_samples: int
    shared: SharedBatch
    bulk_offer: BulkOffer
    bulk_size: int
    needs_room: int
    def __init__(self, epoch: _Optional[int] = ..., rank: _Optional[int] = ..., step: _Optional[int] = ..., tensors: _Optional[_Iterable[_Union[Tensor, _Mapping]]] = ..., sample_indices: _Optional[_Iterable[int]] = ..., replaced_samples: _Optional[int] = ..., shared: _Optional[_Union[SharedBatch, _Mapping]] = ..., bulk_offer: _Optional[_Union[BulkOffer, _Mapping]] = ..., bulk_size: _Optional[int] = ..., needs_room: _Optional[int] = ...) -> None: ...

class BulkOffer(_message.Message):
    __slots__ = ("port", "token")
    PORT_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    port: int
    token: bytes
    def __init__(self, port: _Optional[int] = ..., token: _Optional[bytes] = ...) -> None: ...

class SharedBatch(_message.Message):
    __slots__ = ("slot", "size")
    SLOT_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    slot: str
    size: int
    def __init__(self, slot: _Optional[str] = ..., size: _Optional[int] = ...) -> None: ...

class GetStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class JobStatus(_message.Message):
    __slots__ = ("job_id", "job_name", "num_samples", "batches_per_rank", "world_size", "batches_served", "samples_served", "bytes_served", "samples_replaced", "active_streams", "samples_per_second", "format", "dataset_fingerprint", "pipeline_hash", "ranks", "priority", "priority_weight", "owner", "sources")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_NAME_FIELD_NUMBER: _ClassVar[int]
    NUM_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    BATCHES_PER_RANK_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    BATCHES_SERVED_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_SERVED_FIELD_NUMBER: _ClassVar[int]
    BYTES_SERVED_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_REPLACED_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_STREAMS_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    DATASET_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    PIPELINE_HASH_FIELD_NUMBER: _ClassVar[int]
    RANKS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    job_name: str
    num_samples: int
    batches_per_rank: int
    world_size: int
    batches_served: int
    samples_served: int
    bytes_served: int
    samples_replaced: int
    active_streams: int
    samples_per_second: float
    format: str
    dataset_fingerprint: str
    pipeline_hash: str
    ranks: _containers.RepeatedCompositeFieldContainer[RankStatus]
    priority: str
    priority_weight: float
    owner: str
    sources: _containers.RepeatedCompositeFieldContainer[MixtureSource]
    def __init__(self, job_id: _Optional[str] = ..., job_name: _Optional[str] = ..., num_samples: _Optional[int] = ..., batches_per_rank: _Optional[int] = ..., world_size: _Optional[int] = ..., batches_served: _Optional[int] = ..., samples_served: _Optional[int] = ..., bytes_served: _Optional[int] = ..., samples_replaced: _Optional[int] = ..., active_streams: _Optional[int] = ..., samples_per_second: _Optional[float] = ..., format: _Optional[str] = ..., dataset_fingerprint: _Optional[str] = ..., pipeline_hash: _Optional[str] = ..., ranks: _Optional[_Iterable[_Union[RankStatus, _Mapping]]] = ..., priority: _Optional[str] = ..., priority_weight: _Optional[float] = ..., owner: _Optional[str] = ..., sources: _Optional[_Iterable[_Union[MixtureSource, _Mapping]]] = ...) -> None: ...

class RankStatus(_message.Message):
    __slots__ = ("rank", "epoch", "step", "position_batches", "lag_batches", "batches_per_second", "data_stall")
    RANK_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    POSITION_BATCHES_FIELD_NUMBER: _ClassVar[int]
    LAG_BATCHES_FIELD_NUMBER: _ClassVar[int]
    BATCHES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    DATA_STALL_FIELD_NUMBER: _ClassVar[int]
    rank: int
    epoch: int
    step: int
    position_batches: int
    lag_batches: int
    batches_per_second: float
    data_stall: float
    def __init__(self, rank: _Optional[int] = ..., epoch: _Optional[int] = ..., step: _Optional[int] = ..., position_batches: _Optional[int] = ..., lag_batches: _Optional[int] = ..., batches_per_second: _Optional[float] = ..., data_stall: _Optional[float] = ...) -> None: ...

class DecoderStatus(_message.Message):
    __slots__ = ("node_id", "in_flight", "decoded")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    DECODED_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    in_flight: int
    decoded: int
    def __init__(self, node_id: _Optional[str] = ..., in_flight: _Optional[int] = ..., decoded: _Optional[int] = ...) -> None: ...

class NodeReads(_message.Message):
    __slots__ = ("node_id", "storage_bytes_read", "storage_row_groups_read", "memory_hits", "memory_misses", "disk_hits", "disk_misses", "disk_bytes", "prepared_memory_hits", "prepared_disk_hits", "prepared_misses", "prepared_memory_bytes", "prepared_disk_bytes", "prepared_peer_hits", "prepared_memory_bound", "prepared_disk_bound", "prepared_memory_sizing", "prepared_disk_sizing", "prepared_deferred")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    STORAGE_BYTES_READ_FIELD_NUMBER: _ClassVar[int]
    STORAGE_ROW_GROUPS_READ_FIELD_NUMBER: _ClassVar[int]
    MEMORY_HITS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MISSES_FIELD_NUMBER: _ClassVar[int]
    DISK_HITS_FIELD_NUMBER: _ClassVar[int]
    DISK_MISSES_FIELD_NUMBER: _ClassVar[int]
    DISK_BYTES_FIELD_NUMBER: _ClassVar[int]
    PREPARED_MEMORY_HITS_FIELD_NUMBER: _ClassVar[int]
    PREPARED_DISK_HITS_FIELD_NUMBER: _ClassVar[int]
    PREPARED_MISSES_FIELD_NUMBER: _ClassVar[int]
    PREPARED_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    PREPARED_DISK_BYTES_FIELD_NUMBER: _ClassVar[int]
    PREPARED_PEER_HITS_FIELD_NUMBER: _ClassVar[int]
    PREPARED_MEMORY_BOUND_FIELD_NUMBER: _ClassVar[int]
    PREPARED_DISK_BOUND_FIELD_NUMBER: _ClassVar[int]
    PREPARED_MEMORY_SIZING_FIELD_NUMBER: _ClassVar[int]
    PREPARED_DISK_SIZING_FIELD_NUMBER: _ClassVar[int]
    PREPARED_DEFERRED_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    storage_bytes_read: int
    storage_row_groups_read: int
    memory_hits: int
    memory_misses: int
    disk_hits: int
    disk_misses: int
    disk_bytes: int
    prepared_memory_hits: int
    prepared_disk_hits: int
    prepared_misses: int
    prepared_memory_bytes: int
    prepared_disk_bytes: int
    prepared_peer_hits: int
    prepared_memory_bound: int
    prepared_disk_bound: int
    prepared_memory_sizing: str
    prepared_disk_sizing: str
    prepared_deferred: int
    def __init__(self, node_id: _Optional[str] = ..., storage_bytes_read: _Optional[int] = ..., storage_row_groups_read: _Optional[int] = ..., memory_hits: _Optional[int] = ..., memory_misses: _Optional[int] = ..., disk_hits: _Optional[int] = ..., disk_misses: _Optional[int] = ..., disk_bytes: _Optional[int] = ..., prepared_memory_hits: _Optional[int] = ..., prepared_disk_hits: _Optional[int] = ..., prepared_misses: _Optional[int] = ..., prepared_memory_bytes: _Optional[int] = ..., prepared_disk_bytes: _Optional[int] = ..., prepared_peer_hits: _Optional[int] = ..., prepared_memory_bound: _Optional[int] = ..., prepared_disk_bound: _Optional[int] = ..., prepared_memory_sizing: _Optional[str] = ..., prepared_disk_sizing: _Optional[str] = ..., prepared_deferred: _Optional[int] = ...) -> None: ...

class DecodeScalingStatus(_message.Message):
    __slots__ = ("enabled", "min_decoders", "max_decoders", "wanted", "ready", "draining", "busy_ratio", "decision", "reason", "last_change", "last_change_seconds_ago", "decisions_up", "decisions_down")
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    MIN_DECODERS_FIELD_NUMBER: _ClassVar[int]
    MAX_DECODERS_FIELD_NUMBER: _ClassVar[int]
    WANTED_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    DRAINING_FIELD_NUMBER: _ClassVar[int]
    BUSY_RATIO_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    LAST_CHANGE_FIELD_NUMBER: _ClassVar[int]
    LAST_CHANGE_SECONDS_AGO_FIELD_NUMBER: _ClassVar[int]
    DECISIONS_UP_FIELD_NUMBER: _ClassVar[int]
    DECISIONS_DOWN_FIELD_NUMBER: _ClassVar[int]
    enabled: bool
    min_decoders: int
    max_decoders: int
    wanted: int
    ready: int
    draining: int
    busy_ratio: float
    decision: str
    reason: str
    last_change: str
    last_change_seconds_ago: float
    decisions_up: int
    decisions_down: int
    def __init__(self, enabled: _Optional[bool] = ..., min_decoders: _Optional[int] = ..., max_decoders: _Optional[int] = ..., wanted: _Optional[int] = ..., ready: _Optional[int] = ..., draining: _Optional[int] = ..., busy_ratio: _Optional[float] = ..., decision: _Optional[str] = ..., reason: _Optional[str] = ..., last_change: _Optional[str] = ..., last_change_seconds_ago: _Optional[float] = ..., decisions_up: _Optional[int] = ..., decisions_down: _Optional[int] = ...) -> None: ...

class ServiceStatus(_message.Message):
    __slots__ = ("protocol_version", "decoders", "jobs", "uptime_seconds", "decoder_status", "node_reads", "scaling")
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    DECODERS_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    UPTIME_SECONDS_FIELD_NUMBER: _ClassVar[int]
    DECODER_STATUS_FIELD_NUMBER: _ClassVar[int]
    NODE_READS_FIELD_NUMBER: _ClassVar[int]
    SCALING_FIELD_NUMBER: _ClassVar[int]
    protocol_version: int
    decoders: int
    jobs: _containers.RepeatedCompositeFieldContainer[JobStatus]
    uptime_seconds: float
    decoder_status: _containers.RepeatedCompositeFieldContainer[DecoderStatus]
    node_reads: _containers.RepeatedCompositeFieldContainer[NodeReads]
    scaling: DecodeScalingStatus
    def __init__(self, protocol_version: _Optional[int] = ..., decoders: _Optional[int] = ..., jobs: _Optional[_Iterable[_Union[JobStatus, _Mapping]]] = ..., uptime_seconds: _Optional[float] = ..., decoder_status: _Optional[_Iterable[_Union[DecoderStatus, _Mapping]]] = ..., node_reads: _Optional[_Iterable[_Union[NodeReads, _Mapping]]] = ..., scaling: _Optional[_Union[DecodeScalingStatus, _Mapping]] = ...) -> None: ...
