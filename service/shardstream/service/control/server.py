"""Assembling the service: Ray, decode pool, job registry, gRPC server, health.

``create_server(config)`` returns ``(Service, port)`` so tests bind port 0.
``Service.stop(grace)`` drains streams, then releases the decode actors.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any
from wsgiref.simple_server import WSGIServer

import grpc
from google.protobuf.message import Message
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from shardstream.proto import SERVICE_NAME
from shardstream.proto.v1 import loader_pb2 as pb
from shardstream.service.allocator import keep_freed_memory
from shardstream.service.config import ServiceConfig
from shardstream.service.control.access import DatasetAccess
from shardstream.service.control.auth import Gate
from shardstream.service.control.bounded import StorageCalls
from shardstream.service.control.decode_scaling import DecodeScaling, request_from_ray
from shardstream.service.control.jobs import JobRegistry
from shardstream.service.control.metrics import ServiceMetrics
from shardstream.service.control.pool import DecodePool
from shardstream.service.control.scaling_policy import PolicySettings, ScalingPolicy
from shardstream.service.control.servicer import LoaderServicer, lenient_parser
from shardstream.service.identities import IdentityFile, Refusals
from shardstream.service.node_messages import ReadSettings
from shardstream.service.server_options import SERVER_OPTIONS
from shardstream.service.shares import priority_weights
from shardstream.service.tls import TlsFiles, server_credentials

log = logging.getLogger(__name__)

ACTOR_START_TIMEOUT_S = 120.0
IDENTITIES_CHECK_S = 1.0  # how often the tokens file is looked at for changes


def grpc_options(max_send_bytes: int, max_receive_bytes: int) -> list[tuple[str, int]]:
    return [
        ("grpc.max_send_message_length", max_send_bytes),
        ("grpc.max_receive_message_length", max_receive_bytes),
        *SERVER_OPTIONS,
    ]


@dataclass
class Service:
    server: grpc.Server
    pool: DecodePool
    registry: JobRegistry
    health: health.HealthServicer
    metrics: ServiceMetrics
    config: ServiceConfig
    storage_calls: StorageCalls
    metrics_server: WSGIServer | None = None
    gate: Gate | None = None  # with a tokens file (auth.py)
    scaling: DecodeScaling | None = None  # with autoscale_max_decoders (decode_scaling.py)
    _stopped: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        threading.Thread(target=self._expire_idle_jobs, name="shardstream-janitor", daemon=True).start()
        if self.gate is not None:
            threading.Thread(target=self._follow_identities, args=(self.gate,), name="shardstream-identities",
                             daemon=True).start()

    def _follow_identities(self, gate: Gate) -> None:
        """Read the tokens file again when it changes: the decode actors get the new table first,
        then the service's port, so a call the port admits is admitted by the decoders too."""
        while not self._stopped.wait(IDENTITIES_CHECK_S):
            try:
                table = gate.file.refresh()
                if table is not None:
                    self.pool.set_identities(table)
                    gate.table = table
            except Exception:  # the watcher must outlive a flaky Ray call
                log.exception("applying the changed tokens file failed")

    def _expire_idle_jobs(self) -> None:
        interval = min(60.0, self.config.job_idle_ttl_s / 4)
        while not self._stopped.wait(interval):
            for job in self.registry.expire(self.config.job_idle_ttl_s, self.pool.streaming_ranks()):
                self.pool.forget(job.job_id)

    @property
    def metrics_port(self) -> int | None:
        return self.metrics_server.server_port if self.metrics_server else None

    def stop(self, grace: float = 5.0) -> None:
        self._stopped.set()
        if self.scaling is not None:
            self.scaling.stop()
        self.health.enter_graceful_shutdown()
        self.server.stop(grace).wait()
        if self.metrics_server is not None:
            self.metrics_server.shutdown()
            self.metrics_server.server_close()
        self.pool.shutdown()
        log.info("service stopped")


def _loader_handler(servicer: LoaderServicer) -> grpc.GenericRpcHandler:
    """The generated registration, except that requests that do not parse reach the servicer as
    MalformedRequest, so they get INVALID_ARGUMENT with the parse error instead of gRPC's bare
    INTERNAL."""
    methods: dict[str, tuple[Any, type[Message], type[Message]]] = {
        "OpenJob": (servicer.OpenJob, pb.OpenJobRequest, pb.OpenJobResponse),
        "ListDecoders": (servicer.ListDecoders, pb.ListDecodersRequest, pb.ListDecodersResponse),
        "GetManifest": (servicer.GetManifest, pb.GetManifestRequest, pb.GetManifestResponse),
        "GetStatus": (servicer.GetStatus, pb.GetStatusRequest, pb.ServiceStatus),
    }
    return grpc.method_handlers_generic_handler(SERVICE_NAME, {
        name: grpc.unary_unary_rpc_method_handler(behavior, request_deserializer=lenient_parser(request),
                                                  response_serializer=response.SerializeToString)
        for name, (behavior, request, response) in methods.items()})


def create_server(config: ServiceConfig) -> tuple[Service, int]:
    """Start the service on an already-initialised Ray; returns the bound port."""
    credentials = server_credentials(config)  # first: unreadable TLS files fail before anything starts
    # ... and a tokens file that does not load (identities.py)
    identities = (IdentityFile(config.auth_tokens_file, priority_weights(config.priority_classes))
                  if config.auth_tokens_file else None)
    keep_freed_memory()  # framed messages reuse mapped heap memory (allocator.py)
    refusals = Refusals("service")
    pool = DecodePool(config.num_decoders, config.decoder_cpus, ReadSettings(
        config.row_group_cache_bytes, config.local_copy_dir, config.local_copy_bytes,
        config.prepared_cache_memory_dir, config.prepared_cache_memory_bytes if config.prepared_cache else 0,
        config.prepared_cache_disk_dir, config.prepared_cache_disk_bytes if config.prepared_cache else 0,
        config.prepared_cache_write_share),
        serving=dataclasses.replace(config.batch_serving, identities=identities.table if identities is not None else None),
        tls=TlsFiles.of(config), wanted=config.autoscale_min_decoders if config.autoscale_max_decoders else None)
    pool.on_refused = refusals.add  # what the decoders' batch servers refused
    pool.wait_ready(ACTOR_START_TIMEOUT_S)
    registry = JobRegistry(config.allowed_transform_modules, DatasetAccess(config.allowed_dataset_prefixes,
                           protocols=config.dataset_protocols),
                           priority_weights(config.priority_classes), config.job_max_cache_bytes,
                           config.max_jobs, config.max_message_bytes, config.max_line_bytes,
                           config.request_limits)
    pool.on_served = registry.record_served
    scaling = _decode_scaling(config, pool, registry)
    storage_calls = StorageCalls(config.max_abandoned_storage_calls)
    metrics = ServiceMetrics(registry, pool, storage_calls, refusals if identities is not None else None, scaling)
    gate = (Gate(identities, refusals, on_unauthenticated=metrics.errors.labels("UNAUTHENTICATED").inc)
            if identities is not None else None)
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=config.grpc_workers, thread_name_prefix="shardstream-rpc"),
        options=grpc_options(config.max_message_bytes, config.max_request_bytes),
        interceptors=[gate.interceptor()] if gate is not None else None,
    )
    pool.on_decoded = metrics.batches_decoded
    server.add_generic_rpc_handlers(
        (_loader_handler(LoaderServicer(config, registry, pool, metrics, storage_calls, gate, scaling)),))
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    port = (server.add_secure_port(config.address, credentials) if credentials is not None
            else server.add_insecure_port(config.address))
    if port == 0:
        raise OSError(f"cannot bind {config.address}")
    server.start()
    for name in ("", SERVICE_NAME):
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    metrics_server = metrics.serve_http(config.host, config.metrics_port) if config.metrics_port is not None else None
    log.info("shardstream serving on %s:%d%s%s with %d decode actor(s)", config.host, port,
             " (TLS)" if credentials is not None else "",
             f" (tokens: {len(identities.table.identities)} identities)" if identities is not None else "", pool.size)
    service = Service(server=server, pool=pool, registry=registry, health=health_servicer,
                      metrics=metrics, config=config, storage_calls=storage_calls,
                      metrics_server=metrics_server, gate=gate, scaling=scaling)
    return service, port


def _decode_scaling(config: ServiceConfig, pool: DecodePool, registry: JobRegistry) -> DecodeScaling | None:
    """The scaling policy, when autoscale_max_decoders is set. It starts at its minimum: with no
    job yet that is what it would come to at its first window anyway."""
    if config.autoscale_max_decoders is None:
        return None
    policy = ScalingPolicy(PolicySettings(config.autoscale_min_decoders, config.autoscale_max_decoders),
                           start=config.autoscale_min_decoders)
    log.info("decode scaling on: %d to %d decoders, judged every %.0f s; starting at %d",
             config.autoscale_min_decoders, config.autoscale_max_decoders, config.autoscale_window_s, policy.wanted)
    return DecodeScaling(policy, pool, registry, config.autoscale_window_s,
                         lambda wanted: request_from_ray(wanted, config.decoder_cpus))


__all__ = ["Service", "create_server", "grpc_options"]
