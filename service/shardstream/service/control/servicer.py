"""The gRPC servicer: message in, domain call, message out.

The error boundary lives here: a ShardstreamError becomes a gRPC status with
its code, its message and the class name in trailing metadata; anything else
becomes INTERNAL, logged with its traceback. Nothing escapes to take the
server down, so one job's bad input never disturbs another's stream.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

import grpc
from google.protobuf.message import DecodeError, Message

from shardstream.proto import PROTOCOL_VERSION
from shardstream.proto.errors import (
    ERROR_METADATA_KEY,
    ProtocolMismatch,
    ShardstreamError,
    StreamProtocolError,
)
from shardstream.proto.v1 import loader_pb2 as pb
from shardstream.proto.v1 import loader_pb2_grpc as pb_grpc
from shardstream.service.config import ServiceConfig
from shardstream.service.control.auth import Gate, caller
from shardstream.service.control.bounded import StorageCalls
from shardstream.service.control.decode_scaling import DecodeScaling
from shardstream.service.control.jobs import Job, JobCounters, JobRegistry, RankProgress
from shardstream.service.control.metrics import ServiceMetrics
from shardstream.service.control.pool import DecodePool
from shardstream.service.control.spec import read_spec
from shardstream.service.control.spec_limits import check_job_id, check_open_request
from shardstream.service.node_messages import CacheSizing, ReadCounters
from shardstream.service.shares import job_decoders, rank_window

log = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])


def _abort(context: grpc.ServicerContext, exc: BaseException, metrics: ServiceMetrics) -> NoReturn:
    metrics.errors.labels(exc.code.name if isinstance(exc, ShardstreamError) else "INTERNAL").inc()
    if isinstance(exc, ShardstreamError):
        context.set_trailing_metadata(((ERROR_METADATA_KEY, type(exc).__name__),))
        context.abort(exc.code, str(exc))
    log.exception("internal error", exc_info=exc)
    context.abort(grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc}")
    raise AssertionError("context.abort returned")  # it always raises


def unary_boundary(method: F) -> F:
    @functools.wraps(method)
    def wrapper(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return method(self, request, context)
        except Exception as exc:
            return _abort(context, exc, self.metrics)

    return wrapper  # type: ignore[return-value]


@dataclass(frozen=True)
class MalformedRequest:
    """A request whose bytes did not parse; the servicer refuses it (StreamProtocolError, INVALID_ARGUMENT)."""

    message_type: str
    error: str

    def refuse(self) -> NoReturn:
        raise StreamProtocolError(f"malformed {self.message_type}: {self.error}")


def lenient_parser(message_cls: type[Message]) -> Callable[[bytes], Message | MalformedRequest]:
    def parse(data: bytes) -> Message | MalformedRequest:
        try:
            return message_cls.FromString(data)
        except DecodeError as exc:
            return MalformedRequest(message_cls.__name__, str(exc) or "does not parse")

    return parse


def _check_version(version: int) -> None:
    if version != PROTOCOL_VERSION:
        raise ProtocolMismatch(
            f"client speaks protocol version {version}, this service speaks {PROTOCOL_VERSION}: "
            "install matching shardstream versions"
        )


class LoaderServicer(pb_grpc.LoaderServicer):
    def __init__(self, config: ServiceConfig, registry: JobRegistry, pool: DecodePool,
                 metrics: ServiceMetrics, storage_calls: StorageCalls, gate: Gate | None = None,
                 scaling: DecodeScaling | None = None) -> None:
        self.config = config
        self.scaling = scaling  # the decode scaling policy's loop, when on (decode_scaling.py)
        self.gate = gate  # None: no tokens file, no identities (auth.py)
        self.registry = registry
        self.pool = pool
        self.metrics = metrics
        self.started = time.monotonic()
        self.storage_calls = storage_calls

    @unary_boundary
    def OpenJob(self, request: pb.OpenJobRequest, context: grpc.ServicerContext) -> pb.OpenJobResponse:
        """Open the job, or join it. It answers once the decode actors ready now hold the job (up to
        DecodePool.register's wait), so every decoder ListDecoders names can serve its first fetch."""
        if isinstance(request, MalformedRequest):
            request.refuse()
        _check_version(request.protocol_version)
        limits = self.config.request_limits
        check_open_request(request, limits)
        spec = read_spec(request.spec, limits)
        identity, owner, allow = caller(), "", None
        if identity is not None and self.gate is not None:  # its grants, checked before anything is read
            self.gate.check_open(identity, spec, request.priority, context.peer())
            owner, allow = identity.name, self.gate.dataset_check(identity, context.peer())
        # Opening reads remote storage, which may not answer: bounded by the deadline (bounded.py).
        # Joining an open job reads nothing.
        job = self.registry.find(request.job_name, spec, request.rank, request.priority, owner) or self.storage_calls.run(
            lambda: self.registry.open(request.job_name, spec, request.rank, request.priority, owner, allow),
            context.time_remaining(), f"opening dataset {list(spec.dataset)}")
        self.pool.register(job.decode)  # every decode actor learns the job (their batch servers plan it)
        return pb.OpenJobResponse(
            job_id=job.job_id,
            spec_fingerprint=job.spec.fingerprint,
            dataset_fingerprint=job.index.fingerprint,
            num_samples=job.index.num_rows,
            samples_per_rank=job.sampling.samples_per_rank,
            batches_per_rank=job.sampling.batches_per_rank,
            sources=_sources(job),
            num_files=len(job.index.shards),
        )

    @unary_boundary
    def ListDecoders(self, request: pb.ListDecodersRequest,
                     context: grpc.ServicerContext) -> pb.ListDecodersResponse:
        """The decoders the job's ranks fetch from now, and each rank's window. Reads nothing, waits
        for nothing: ranks call it every DECODERS_REFRESH_S."""
        job = self._visible_job(request, context, "list the decoders of")
        return pb.ListDecodersResponse(
            batch_servers=job_decoders(job.job_id, self.pool.batch_addresses(), self.config.job_max_decoders),
            max_window_bytes=rank_window(self.config.job_max_in_flight_bytes, job.spec.world_size),
        )

    @unary_boundary
    def GetManifest(self, request: pb.GetManifestRequest, context: grpc.ServicerContext) -> pb.GetManifestResponse:
        job = self._visible_job(request, context, "read the manifest of")
        return pb.GetManifestResponse(manifest_json=json.dumps(job.manifest, sort_keys=True))

    def _visible_job(self, request: pb.ListDecodersRequest | pb.GetManifestRequest, context: grpc.ServicerContext,
                     what: str) -> Job:
        """The open job a request names by id: its version checked, the id held to the request
        limits, and the job one the caller may see (the gate: its own, or any for an admin)."""
        if isinstance(request, MalformedRequest):
            request.refuse()
        _check_version(request.protocol_version)
        check_job_id(request.job_id, self.config.request_limits)
        job = self.registry.get(request.job_id)
        identity = caller()
        if identity is not None and self.gate is not None:
            self.gate.check_job(identity, job.job_id, job.owner, what, context.peer())
        return job

    @unary_boundary
    def GetStatus(self, request: pb.GetStatusRequest, context: grpc.ServicerContext) -> pb.ServiceStatus:
        if isinstance(request, MalformedRequest):
            request.refuse()
        streaming = self.pool.streaming_ranks()
        identity = caller()  # with a tokens file: its own jobs (an admin's: all)
        return pb.ServiceStatus(
            protocol_version=PROTOCOL_VERSION,
            decoders=self.pool.size,
            jobs=[_job_status(job, streaming.get(job.job_id, 0)) for job in self.registry.all()
                  if Gate.sees(identity, job.owner)],
            uptime_seconds=time.monotonic() - self.started,
            decoder_status=[pb.DecoderStatus(node_id=node, in_flight=n, decoded=done)
                            for node, n, done in self.pool.status()],
            node_reads=_nodes_reads(self.pool.nodes.reads_by_node(), self.pool.nodes.cache_sizing_by_node()),
            scaling=_scaling_status(self.scaling, self.pool),
        )


def _scaling_status(scaling: DecodeScaling | None, pool: DecodePool) -> pb.DecodeScalingStatus:
    if scaling is None:
        return pb.DecodeScalingStatus(enabled=False, wanted=pool.size, ready=pool.size, draining=pool.draining)
    state, settings = scaling.state, scaling.policy.settings
    last = state.last_change
    return pb.DecodeScalingStatus(
        enabled=True, min_decoders=settings.min_decoders, max_decoders=settings.max_decoders,
        wanted=state.decision.wanted, ready=pool.size, draining=pool.draining,
        busy_ratio=state.busy_ratio, decision=state.decision.direction, reason=state.decision.reason,
        last_change=last.reason if last is not None else "",
        last_change_seconds_ago=time.monotonic() - state.changed_at if last is not None else 0.0,
        decisions_up=state.up, decisions_down=state.down)


def _nodes_reads(reads: dict[str, ReadCounters], sizing: dict[str, CacheSizing]) -> list[pb.NodeReads]:
    """Each node's reads and prepared-cache bounds, known from its actors' reports and start-up."""
    return [_node_reads(node, reads.get(node, ReadCounters()), sizing.get(node)) for node in sorted({*reads, *sizing})]


def _node_reads(node: str, r: ReadCounters, sizing: CacheSizing | None) -> pb.NodeReads:
    reads = pb.NodeReads(node_id=node, storage_bytes_read=r.storage_bytes, storage_row_groups_read=r.storage_reads,
                         memory_hits=r.memory_hits, memory_misses=r.memory_misses, disk_hits=r.disk_hits,
                         disk_misses=r.disk_misses, disk_bytes=r.disk_bytes,
                         prepared_memory_hits=r.prepared_memory_hits, prepared_disk_hits=r.prepared_disk_hits,
                         prepared_misses=r.prepared_misses, prepared_memory_bytes=r.prepared_memory_bytes,
                         prepared_disk_bytes=r.prepared_disk_bytes, prepared_peer_hits=r.prepared_peer_hits,
                         prepared_deferred=r.prepared_deferred)
    if sizing is not None:
        reads.prepared_memory_bound, reads.prepared_memory_sizing = sizing.memory.bytes, sizing.memory.reason
        reads.prepared_disk_bound, reads.prepared_disk_sizing = sizing.disk.bytes, sizing.disk.reason
    return reads


def _job_status(job: Job, streaming: int) -> pb.JobStatus:
    """`streaming`: how many of its ranks have a batch stream open on a decoder."""
    c = job.counters
    return pb.JobStatus(
        job_id=job.job_id, job_name=job.name, num_samples=job.index.num_rows,
        batches_per_rank=job.sampling.batches_per_rank, world_size=job.spec.world_size,
        batches_served=c.batches_served, samples_served=c.samples_served,
        bytes_served=c.bytes_served, samples_replaced=c.samples_replaced,
        active_streams=streaming, samples_per_second=job.throughput.per_second(),
        format=job.index.format, dataset_fingerprint=job.index.fingerprint,
        pipeline_hash=job.manifest.get("pipeline", {}).get("hash", ""),
        ranks=[_rank_status(rank) for rank in job.ranks()],
        priority=job.priority, priority_weight=job.decode.weight, owner=job.owner, sources=_sources(job, c),
    )


def _sources(job: Job, served: JobCounters | None = None) -> list[pb.MixtureSource]:
    """A mixture's sources: where each one's samples are, and what was served of each."""
    starts = job.index.source_starts
    samples, tokens = (served.source_samples, served.source_tokens) if served is not None else ([], [])
    return [pb.MixtureSource(name=name, first_sample=int(starts[i]), num_samples=rows,
                             samples_served=samples[i] if samples else 0, tokens_served=tokens[i] if tokens else 0)
            for i, (name, rows) in enumerate(job.index.sources)]


def _rank_status(r: RankProgress) -> pb.RankStatus:
    return pb.RankStatus(rank=r.rank, epoch=r.epoch, step=r.step, position_batches=r.position, lag_batches=r.lag,
                         batches_per_second=r.batches_per_second, data_stall=r.data_stall)


__all__ = ["LoaderServicer"]
