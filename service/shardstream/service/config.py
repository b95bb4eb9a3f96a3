"""Service configuration: one frozen dataclass, layered defaults -> SHARDSTREAM_* env -> flags.

Each field is declared once with `setting` (settings.py): its environment
variable, `serve` flag, bounds and Helm chart value all come from it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from shardstream.service.identities import IdentityTable
from shardstream.service.limits import (
    DATASET_PROTOCOLS,
    DEFAULT_LIMITS,
    DEFAULT_MAX_JOBS,
    RequestLimits,
)
from shardstream.service.node.write_budget import MIN_SHARE
from shardstream.service.settings import ENV_PREFIX, check_bounds, from_environment, setting
from shardstream.service.shares import priority_weights


@dataclass(frozen=True)
class ServeSettings:
    """How a decode actor's batch server serves ranks (shipped to every actor)."""

    ports: range = range(0, 1)  # its batch server binds the first free one; port 0: any free port
    decode_timeout_s: float = 300.0  # a batch that takes longer ends its stream with DEADLINE_EXCEEDED
    max_message_bytes: int = 1 << 30
    max_epoch: int = DEFAULT_LIMITS.epoch  # a stream for a later epoch is refused (limits.py)
    # The tokens file's identities (auth_tokens_file; identities.py): who may open a stream, and
    # whose jobs it may fetch. None: no token asked. The pool sends a new table when the file changes.
    identities: IdentityTable | None = None


@dataclass(frozen=True)
class ServiceConfig:
    """Every setting of `shardstream serve`: defaults, then SHARDSTREAM_<NAME>, then --<name> flags."""

    host: str = setting("127.0.0.1", "interface the service's gRPC port binds (0.0.0.0: all)",
                        chart="0.0.0.0")
    port: int = setting(50051, "the service's gRPC port (0: any free port)", minimum=0, maximum=65535,
                        chart="service.port")
    ray_address: str | None = setting(
        None, "an existing Ray cluster, e.g. auto or ray://head:10001 (unset: start an embedded local Ray)",
        chart="auto, the head's own Ray")
    num_decoders: int | None = setting(
        None, "decode actors (unset: one per unit of the cluster's `decode` resource)", minimum=1)
    autoscale_max_decoders: int | None = setting(
        None, "size the decode pool by demand, up to this many actors: the service asks the cluster for decode "
        "capacity while ranks wait for data and an added decoder still raises their throughput (the Ray "
        "autoscaler; on Kubernetes the HPA scales decode workers on shardstream_decoders_wanted), and drains "
        "decoders when demand falls (docs/decode-scaling.md). Unset: the pool follows the cluster's `decode` "
        "resource", minimum=1)
    autoscale_min_decoders: int = setting(
        1, "the fewest decode actors the scaling policy keeps (with autoscale_max_decoders)", minimum=1)
    autoscale_window_s: float = setting(
        10.0, "the scaling policy's measuring window: demand is averaged over it, and a change is judged a "
        "window after its decoders are ready, seconds", above=0)
    decoder_cpus: float = setting(
        1.0, "CPUs each decode actor reserves; a decode worker offers floor(decode.cpus / decoder_cpus) units",
        above=0)
    allowed_transform_modules: tuple[str, ...] = setting(
        (), "import-path prefix user transforms and collate functions ('package.module:name') may come from",
        flag="--allow-transform-module", metavar="PREFIX")
    allowed_dataset_prefixes: tuple[str, ...] = setting(
        (), "URL prefix (gs://bucket/path, s3://..., /local/path) every dataset a client names must lie "
        "under; the service reads with its own credentials (none: any dataset)",
        flag="--allow-dataset-prefix", metavar="URL")
    dataset_protocols: tuple[str, ...] = setting(
        DATASET_PROTOCOLS, "a storage protocol the service reads datasets from, as fsspec names it first "
        "(file, gs, s3, hdfs, abfs, ...; its package must be installed where the service and decoders run); "
        "a URL over any other (http, ftp, memory, ...) is refused", flag="--dataset-protocol", metavar="NAME")
    data_port_base: int = setting(
        0, "decode actors bind their gRPC and bulk ports, the first free ones from here (0: any free port)",
        minimum=0, maximum=65535, chart="decode.dataPort")
    data_ports: int = setting(32, "how many ports from data_port_base a node's decode actors may take",
                              minimum=1, chart="4 x the decode units of a worker")
    decode_timeout_s: float = setting(300.0, "deadline for decoding one batch, seconds", above=0)
    row_group_cache_bytes: int = setting(
        256 * 2**20, "each decode actor's in-memory cache of row groups, bytes; used when the local copy is "
        "off (with it on, row groups are memory-mapped from the copy)", minimum=0)
    local_copy_dir: str = setting(
        "", "where each decode node keeps the row groups it read (empty: $TMPDIR/shardstream-local-copy)",
        chart="decode.localCopy.mountPath, the same path on every decode worker")
    local_copy_bytes: int = setting(
        64 * 2**30, "bound of each decode node's local copy of the row groups it read, stored uncompressed; "
        "least recently used row groups are removed beyond it (0: off, every miss reads storage). Keep it "
        "below the volume's size", minimum=0)
    prepared_cache: bool = setting(
        True, "keep what a transform's prepare made of each sample (decoded images) on each decode node, so "
        "later epochs and other jobs over the same data skip reading and decoding it (docs/prepared-cache.md); "
        "false: both tiers off, every epoch decodes again")
    prepared_cache_memory_bytes: int | None = setting(
        None, "each decode node's memory tier (a tmpfs) of prepared samples, bytes (0: off; unset: each node "
        "sizes it when its decode actors start, from the room its /dev/shm has beside Ray's object store and "
        "its memory limit, and says what it chose in the log and `shardstream status`)", minimum=0)
    prepared_cache_memory_dir: str = setting(
        "", "the tmpfs directory of that memory tier (empty: /dev/shm/shardstream-prepared)",
        chart="/dev/shm/shardstream-prepared (the pods' shm volume)")
    prepared_cache_disk_bytes: int | None = setting(
        None, "each decode node's disk tier of prepared samples, bytes (0: off; unset: a quarter of the free "
        "space of its directory's disk, at most 64 GiB, decided on each node). In the chart it lives in "
        "decode.localCopy's volume: keep its size above local_copy_bytes plus this", minimum=0,
        chart="decode.localCopy.preparedSamplesBytes")
    prepared_cache_disk_dir: str = setting(
        "", "a local-disk directory for that disk tier (empty: prepared-samples in the local copy's directory)",
        chart="<decode.localCopy.mountPath>/prepared-samples (the local copy's volume)")
    prepared_cache_write_share: float = setting(
        MIN_SHARE, "the share of each decode actor's time that keeping a job's prepared samples may take while the "
        "job finds none kept before (its first epoch): that epoch runs at most this much slower than with the "
        "cache off, and what it cannot keep is kept in the next, which may take up to nine tenths of it (docs/prepared-cache.md). "
        "1: keep every sample the first time it is prepared, at the cost of a slower first epoch",
        above=0, maximum=1)
    max_message_bytes: int = setting(1 << 30, "largest gRPC message (one batch) a decode actor sends, bytes",
                                     minimum=1)
    max_request_bytes: int = setting(16 << 20, "largest request a client may send, bytes (larger ones get "
                                     "RESOURCE_EXHAUSTED)", minimum=1)
    # Request limits (limits.py; docs/architecture.md, "Limits"): a job or stream past one is refused
    # with INVALID_ARGUMENT naming the field, its value and the setting.
    max_jobs: int = setting(
        DEFAULT_MAX_JOBS, "the most jobs the service holds at once (each keeps its dataset's index, and its "
        "per-sample weights or lengths, on the head and every decode actor); a new job past it is refused "
        "with RESOURCE_EXHAUSTED until idle ones are forgotten (job_idle_ttl_s)", minimum=1)
    max_world_size: int = setting(
        DEFAULT_LIMITS.world_size, "the most ranks a job may have (world_size); what the service keeps per rank "
        "is small, but it keeps it for every rank that reports", minimum=1)
    max_batch_size: int = setting(
        DEFAULT_LIMITS.batch_size, "the most samples in one batch (batch_size); a decode actor holds a whole "
        "batch, decoded, while it sends it", minimum=1)
    max_shuffle_block: int = setting(DEFAULT_LIMITS.shuffle_block, "the largest shuffle_block, samples", minimum=1)
    max_bucket_window: int = setting(
        DEFAULT_LIMITS.bucket_window, "the largest bucket_window, batches (each window is sorted whole)", minimum=1)
    max_epoch: int = setting(DEFAULT_LIMITS.epoch, "the latest epoch a rank may fetch", minimum=0)
    max_seq_len: int = setting(
        DEFAULT_LIMITS.seq_len, "the longest token window, tokens (format 'tokens', format_args seq_len); each "
        "sample is two int64 arrays of it. Also the longest text the 'tokenize' transform makes (its max_length, "
        "or any text without one: a longer one is a corrupt sample)", minimum=1)
    max_line_bytes: int = setting(
        DEFAULT_LIMITS.line_bytes, "the longest line of a JSON Lines file, bytes (format 'jsonl', format_args "
        "max_line_bytes, which it is by default); a decoder holds a line whole, parsed, while it reads it; a "
        "dataset with a longer line is refused when the job opens, naming the line", minimum=1)
    max_image_side: int = setting(
        DEFAULT_LIMITS.image_side, "the largest side of an image the built-in image transform makes, pixels "
        "(transform_args size, resize_short)", minimum=1)
    max_dataset_entries: int = setting(
        DEFAULT_LIMITS.dataset_entries, "the most entries (files, directories, globs) a job's dataset list may "
        "have", minimum=1)
    max_columns: int = setting(DEFAULT_LIMITS.columns, "the most columns a job may select", minimum=1)
    max_url_chars: int = setting(DEFAULT_LIMITS.url_chars, "the longest dataset URL, characters", minimum=1)
    max_name_chars: int = setting(
        DEFAULT_LIMITS.name_chars, "the longest name in a request (job name, column, transform, format, collate, "
        "weights, bucket_by, priority), characters", minimum=1)
    max_args_bytes: int = setting(
        DEFAULT_LIMITS.args_bytes, "the largest transform_args or format_args, bytes of JSON", minimum=2)
    max_args_depth: int = setting(
        DEFAULT_LIMITS.args_depth, "how deeply transform_args and format_args may nest (JSON arrays and objects)",
        minimum=1, maximum=500)
    job_idle_ttl_s: float = setting(3600.0, "a job with no open stream for this long, seconds, is forgotten "
                                    "(clients reopen it on demand)", above=0)
    grpc_workers: int = setting(64, "concurrent control calls (OpenJob, ListDecoders, GetManifest, GetStatus) "
                                "and health calls on the service's port", minimum=2)
    max_abandoned_storage_calls: int = setting(
        64, "dataset listings left running past their request's deadline (storage not answering) before "
        "further opens are refused with RESOURCE_EXHAUSTED; each holds a thread until the store answers",
        minimum=1)
    priority_classes: tuple[str, ...] = setting(
        ("default=1",), "a priority class NAME=WEIGHT jobs may ask for (RemoteLoader(priority=NAME)); each "
        "decode actor shares its time between the jobs waiting on it by these weights, whatever their rank "
        "counts (a job that names no class is in `default`, weight 1 unless given here)",
        flag="--priority-class", metavar="NAME=WEIGHT")
    job_max_decoders: int | None = setting(
        None, "the most decode actors one job's batches are decoded on (unset: all of them); each job gets "
        "its own stable subset, so one job cannot occupy every actor", minimum=1)
    job_max_in_flight_bytes: int | None = setting(
        None, "the most batch bytes one job's ranks together may hold received or in flight; each rank's "
        "prefetch window is clamped to this divided by the job's world size (unset: the client's own)",
        minimum=1)
    job_max_cache_bytes: int | None = setting(
        None, "the most bytes of prepared samples one job keeps from each decode actor in the node's "
        "prepared-sample cache; beyond it the job's samples are prepared but not kept, so one large job "
        "cannot evict every other job's (unset: no limit)", minimum=0)
    object_store_memory: int | None = setting(
        None, "the object store of an embedded local Ray, bytes (unset: Ray's default)", minimum=1,
        chart="unset (ray.objectStoreMemory sizes each node's store)")
    metrics_port: int | None = setting(
        None, "serve Prometheus metrics over HTTP on this port (0: any free port; unset: off)",
        minimum=0, maximum=65535, chart="metrics.port when metrics.enabled, else unset")
    tls_cert_file: str | None = setting(
        None, "PEM certificate chain: the service's and decode actors' ports speak TLS (with tls_key_file)",
        flag="--tls-cert", metavar="PEM", chart="tls.crt of tls.secretName's Secret")
    tls_key_file: str | None = setting(None, "the certificate's PEM private key", flag="--tls-key", metavar="PEM",
                                       chart="tls.key of tls.secretName's Secret")
    tls_client_ca_file: str | None = setting(
        None, "PEM CA(s): clients must present a certificate it signed (mutual TLS)", flag="--tls-client-ca",
        metavar="PEM", chart="ca.crt of tls.secretName's Secret, when tls.clientCA")
    auth_tokens_file: str | None = setting(
        None, "a YAML or JSON file of identities, each with its tokens (sha256 digests, or the tokens) and "
        "what it may use: every call on the service's and the decode actors' ports must then carry "
        "'authorization: Bearer <token>' (docs/identities.md); read again when it changes (unset: no tokens "
        "asked)", metavar="FILE", chart="auth.key of auth.secretName's Secret, when auth.secretName")

    def __post_init__(self) -> None:
        check_bounds(self)
        priority_weights(self.priority_classes)  # a ValueError naming a malformed class
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise ValueError("tls_cert_file and tls_key_file go together: set both, or neither")
        if self.tls_client_ca_file and not self.tls_cert_file:
            raise ValueError("tls_client_ca_file needs TLS on: set tls_cert_file and tls_key_file too")
        if self.autoscale_max_decoders is not None and self.num_decoders is not None:
            raise ValueError("num_decoders fixes the pool's size and autoscale_max_decoders sizes it by demand: "
                             "set one of them")
        if self.autoscale_max_decoders is not None and self.autoscale_min_decoders > self.autoscale_max_decoders:
            raise ValueError(f"autoscale_min_decoders ({self.autoscale_min_decoders}) must be <= "
                             f"autoscale_max_decoders ({self.autoscale_max_decoders})")
        if self.data_port_base and self.data_port_base + self.data_ports - 1 > 65535:
            raise ValueError(f"data_port_base + data_ports - 1 must be <= 65535, got "
                             f"{self.data_port_base + self.data_ports - 1}")

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def batch_serving(self) -> ServeSettings:
        """How decode actors serve batches to ranks."""
        ports = (range(self.data_port_base, self.data_port_base + self.data_ports) if self.data_port_base
                 else range(0, 1))
        return ServeSettings(ports, self.decode_timeout_s, self.max_message_bytes, self.max_epoch)

    @property
    def request_limits(self) -> RequestLimits:
        """The max_* settings, as the checks of each request take them."""
        return RequestLimits(**{name: getattr(self, f"max_{name}") for name in RequestLimits.__dataclass_fields__})

    @classmethod
    def load(cls, overrides: Mapping[str, Any] | None = None,
             environ: Mapping[str, str] | None = None) -> ServiceConfig:
        """Defaults, then SHARDSTREAM_<NAME> from the environment, then overrides (flags)."""
        values = from_environment(cls, os.environ if environ is None else environ)
        values.update({k: v for k, v in (overrides or {}).items() if v is not None})
        return cls(**values)


__all__ = ["ENV_PREFIX", "ServeSettings", "ServiceConfig"]
