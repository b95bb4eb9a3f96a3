"""A decode actor's own gRPC port: FetchBatches, batches decoded straight into the message sent.

Runs on the decode node, inside the actor's process (docs/data-plane.md). An
asyncio gRPC server on a thread of its own holds any number of streams
without a thread each; the decoding itself runs one batch at a time on a
single worker thread, because an actor is one CPU, shared between jobs by
their weights (fair_queue.py). The actor computes the
epoch's plan itself, so a request names (epoch, rank, step) and no sample
index crosses the wire. Each stream, once admitted here, is served by
batch_stream.py.

With a tokens file (identities.py) a stream must carry a known token
(UNAUTHENTICATED otherwise), and gets only the batches of jobs its identity
opened (PERMISSION_DENIED otherwise), checked when it opens and with each
want. The stream's bulk socket needs no token of its own: the one-time token
for it is handed out on this stream, after these checks (bulk_listener.py).
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import grpc

from shardstream.proto import BATCH_SERVICE_NAME, PROTOCOL_VERSION
from shardstream.proto.errors import (
    ERROR_METADATA_KEY,
    DeadlineExceeded,
    PermissionDenied,
    ProtocolMismatch,
    ShardstreamError,
    StreamProtocolError,
)
from shardstream.proto.v1 import loader_pb2 as pb
from shardstream.proto.wire import Allocate
from shardstream.service.config import ServeSettings
from shardstream.service.identities import Identity, Refusals, authenticate
from shardstream.service.limits import RequestLimits, check_at_most
from shardstream.service.node.batch_stream import Queued, serve_stream, wake
from shardstream.service.node.batching import DecodedBatch
from shardstream.service.node.bulk_listener import BulkListener
from shardstream.service.node.fair_queue import FairQueue
from shardstream.service.node.step_source import Served, StepSource
from shardstream.service.node_messages import JobServed
from shardstream.service.server_options import SERVER_OPTIONS
from shardstream.service.tls import TlsFiles, credentials_from

log = logging.getLogger(__name__)


class BatchServer:
    """The actor's batch port: streams admitted here are served by batch_stream.py, their steps
    decoded on the actor's one decoding thread, what they sent counted for the actor's report."""

    def __init__(self, steps: StepSource, host: str, settings: ServeSettings | None = None,
                 tls: TlsFiles | None = None) -> None:
        settings = settings or ServeSettings()
        self.identities = settings.identities  # the tokens file's (None: no token asked); replaced when it changes
        self.refusals = Refusals("decoder")  # counted into the actor's report
        ports, max_message_bytes = settings.ports, settings.max_message_bytes
        self._decode_timeout_s = settings.decode_timeout_s
        self._max_epoch = settings.max_epoch  # a stream for a later epoch is refused (limits.py)
        self._steps = steps  # the actor's jobs (step_source.py)
        self._open: collections.Counter[tuple[str, int]] = collections.Counter()  # (job, rank) -> streams
        self._served = Served()  # since the actor's last report (take_served)
        self._served_lock = threading.Lock()
        # One batch at a time (an actor is one CPU), shared between jobs by weight (fair_queue.py).
        self._decoder = FairQueue()
        self._loop = asyncio.new_event_loop()
        self._server: grpc.aio.Server | None = None
        started = threading.Event()
        # TLS (and client certificates) as on the service's port, on both ports
        self._credentials = credentials_from(tls) if tls is not None else None
        self._tls = tls
        self.bulk: BulkListener | None = None  # the bulk port (bulk_listener.py)
        self.draining = False  # the pool is giving this actor back (drain)
        self.streams: set[asyncio.Queue[Queued]] = set()  # each open stream's wants (the loop's thread only)
        self._thread = threading.Thread(target=self._run, args=(host, ports, max_message_bytes, started),
                                        name="shardstream-batch-server", daemon=True)
        self._thread.start()
        if not started.wait(30) or self.port == 0:
            self._loop.call_soon_threadsafe(self._loop.stop)
            raise OSError(f"the batch server could not bind any of {_describe_ports(host, ports)}: more decode "
                          "actors on this node than data_ports, or other processes hold those ports")
        self.address = f"{host}:{self.port}"

    port = 0
    queued = 0  # steps accepted and being decoded or waiting to be (read by the actor's report)

    def take_served(self) -> Served:
        """What this server sent and refused since the last call, and what it holds now (the
        actor's report, once a second)."""
        with self._served_lock:
            served, self._served = self._served, Served()
        for job_id, rank in list(self._open):
            served.streaming.setdefault(job_id, set()).add(rank)
        served.queued, served.refusals = self.queued, self.refusals.take()
        return served

    def record_sent(self, opened: pb.FetchOpen, step: int, decoded: DecodedBatch, nbytes: int) -> None:
        """A batch went out on a stream (the actor's report: batches, samples, bytes, positions)."""
        with self._served_lock:
            job = self._served.jobs.setdefault(opened.job_id, JobServed())
            job.batches += 1
            job.samples += len(decoded.indices)
            job.nbytes += nbytes
            if decoded.by_source is not None:
                job.add_sources(*decoded.by_source)
            job.positions[opened.rank] = max(job.positions.get(opened.rank, (opened.epoch, step)), (opened.epoch, step))

    def forget(self, job_id: str) -> None:
        """The job is gone: drop its share's account."""
        self._decoder.forget(job_id)

    def _run(self, host: str, ports: Sequence[int], max_message_bytes: int, started: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)

        async def start() -> None:
            # No SO_REUSEPORT: two actors of a node must not share a port of the range.
            server = grpc.aio.server(options=[("grpc.max_send_message_length", max_message_bytes),
                                              ("grpc.max_receive_message_length", 1 << 20),
                                              ("grpc.so_reuseport", 0), *SERVER_OPTIONS])
            server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(BATCH_SERVICE_NAME, {
                "FetchBatches": grpc.stream_stream_rpc_method_handler(
                    self._fetch, request_deserializer=_parse_control, response_serializer=None),
            }),))
            for port in ports:  # the first free one
                try:
                    self.port = (server.add_secure_port(f"{host}:{port}", self._credentials) if self._credentials
                                 else server.add_insecure_port(f"{host}:{port}"))
                except RuntimeError:
                    continue
                if self.port:
                    break
            if not self.port:
                return
            await server.start()
            self._server = server
            try:
                self.bulk = BulkListener(host, [p for p in ports if p != self.port] or [0], self._tls)
                self.bulk.start()
            except OSError as exc:  # ranks elsewhere then get their batches on the stream
                log.warning("no bulk port for this decoder: none of %s is free (%s): more decode actors on "
                            "this node than data_ports allow (each takes two)", _describe_ports(host, ports), exc)

        try:
            self._loop.run_until_complete(start())
        finally:
            started.set()
        self._loop.run_forever()

    def drain(self) -> None:
        """Stop taking wants: each stream sends the batches it accepted, then ends with
        DecoderDraining, and its rank asks the other decoders for the rest."""
        self._loop.call_soon_threadsafe(self._start_draining)

    def _start_draining(self) -> None:
        self.draining = True
        for queue in self.streams:  # an idle stream's loop is waiting for a want: wake it
            wake(queue)

    def stop(self, grace: float = 1.0) -> None:
        if self.bulk is not None:
            self._loop.call_soon_threadsafe(self.bulk.close)
        if self._server is not None:
            asyncio.run_coroutine_threadsafe(self._server.stop(grace), self._loop).result(grace + 5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=grace + 5)
        self._decoder.close()

    async def _fetch(self, requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        try:
            identity = self._admit(context)  # before reading anything
            first = await anext(requests, None)
            if not isinstance(first, pb.FetchControl) or first.WhichOneof("kind") != "open":
                raise StreamProtocolError("a FetchBatches stream must start with an 'open' message")
            opened = first.open
            if opened.protocol_version != PROTOCOL_VERSION:
                raise ProtocolMismatch(f"client speaks protocol version {opened.protocol_version}, this "
                                       f"decoder speaks {PROTOCOL_VERSION}: install matching shardstream versions")
            self.check_owner(identity, opened.job_id, context.peer())
            check_at_most("epoch", opened.epoch, RequestLimits(epoch=self._max_epoch), "epoch")
            stream = (opened.job_id, opened.rank)
            self._open[stream] += 1
            try:
                async for message in serve_stream(self, requests, opened, identity, context.peer()):
                    yield message
            finally:
                self._open[stream] -= 1
                if not self._open[stream]:
                    del self._open[stream]
        except ShardstreamError as exc:
            context.set_trailing_metadata(((ERROR_METADATA_KEY, type(exc).__name__),))
            await context.abort(exc.code, str(exc))
        except Exception as exc:
            # Typed (from the service), so the rank fails at once instead of retrying the other
            # decoders, which would repeat it: only link and process failures are retried.
            log.exception("batch server: internal error")
            context.set_trailing_metadata(((ERROR_METADATA_KEY, ShardstreamError.__name__),))
            await context.abort(grpc.StatusCode.INTERNAL, f"internal error in decoder {self.address}: "
                                f"{type(exc).__name__}: {exc}")

    def _admit(self, context: grpc.aio.ServicerContext) -> Identity | None:
        """The stream's identity (its `authorization` metadata), or Unauthenticated; None without a
        tokens file."""
        table = self.identities
        if table is None:
            return None
        return authenticate(table, context.invocation_metadata(), "FetchBatches", self.refusals, context.peer())

    def check_owner(self, identity: Identity | None, job_id: str, peer: str) -> None:
        """PermissionDenied unless the job was opened by the stream's identity (a job this actor does
        not hold passes here: decoding it says JobNotFound)."""
        if identity is None:
            return
        owner = self._steps.job_owner(job_id)
        if owner is not None and owner != identity.name:
            raise self.refusals.refuse(
                PermissionDenied, identity.name, "job", f"identity {identity.name!r} may not fetch batches of job "
                f"{job_id!r}: another identity opened it", peer)

    async def decode(self, opened: pb.FetchOpen, step: int, allocate: Allocate) -> DecodedBatch:
        """Step `step` of the stream `opened`, decoded in its job's turn into what `allocate` gives."""
        loop = asyncio.get_running_loop()
        self.queued += 1
        try:
            decoding = self._decoder.submit(opened.job_id, self._steps.job_weight(opened.job_id), functools.partial(
                self._steps.decode_step, opened.job_id, opened.epoch, opened.rank, step, allocate))
            return await asyncio.wait_for(asyncio.wrap_future(decoding, loop=loop), self._decode_timeout_s)
        except TimeoutError:
            raise DeadlineExceeded(
                f"decoding batch {step} of job {opened.job_id} (epoch {opened.epoch}, rank "
                f"{opened.rank}) took longer than {self._decode_timeout_s:.0f} s") from None
        finally:
            self.queued -= 1

    def record_stall(self, opened: pb.FetchOpen, stall: float) -> None:
        """The rank's data stall, as its want reported it (the service's status and metrics)."""
        with self._served_lock:
            job = self._served.jobs.setdefault(opened.job_id, JobServed())
            job.stalls[opened.rank] = (stall, time.time())

    def after_decoding(self, job_id: str, fn: Callable[[], Any]) -> None:
        """Run `fn` on the decoding thread in the job's turn: after any decode queued before it."""
        self._decoder.submit(job_id, self._steps.job_weight(job_id), fn)


def _describe_ports(host: str, ports: Sequence[int]) -> str:
    if isinstance(ports, range) and len(ports) > 1:
        return f"{host}:{ports.start}-{ports.stop - 1}"
    return ", ".join(f"{host}:{port}" for port in ports)


def _parse_control(data: bytes) -> pb.FetchControl | None:
    """None for bytes that do not parse: the stream refuses them with INVALID_ARGUMENT."""
    try:
        return pb.FetchControl.FromString(data)
    except Exception:
        return None


__all__ = ["BatchServer"]
