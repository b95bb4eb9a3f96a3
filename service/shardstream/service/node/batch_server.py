"""A decode actor's own gRPC port: FetchBatches, batches decoded straight into the message sent.

Runs on the decode node, inside the actor's process (docs/data-plane.md). An
asyncio gRPC server on a thread of its own holds any number of streams
without a thread each; the decoding itself runs one batch at a time on a
single worker thread, because an actor is one CPU, shared between jobs by
their weights (fair_queue.py). The actor computes the
epoch's plan itself, so a request names (epoch, rank, step) and no sample
index crosses the wire.

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
from collections.abc import AsyncIterator, Sequence
from typing import Any

import grpc

from shardstream.proto import BATCH_SERVICE_NAME, PROTOCOL_VERSION
from shardstream.proto.errors import (
    ERROR_METADATA_KEY,
    DeadlineExceeded,
    DecoderDraining,
    PermissionDenied,
    ProtocolMismatch,
    ServiceUnavailable,
    ShardstreamError,
    StreamProtocolError,
)
from shardstream.proto.v1 import loader_pb2 as pb
from shardstream.proto.wire import (
    Allocate,
    BulkOffer,
    SharedRef,
    encode_batch,
    encode_bulk,
    encode_bulk_offer,
    encode_needs_room,
    encode_shared,
)
from shardstream.proto.writable_bytes import writable_bytes
from shardstream.service.config import ServeSettings
from shardstream.service.identities import Identity, Refusals, authenticate
from shardstream.service.limits import RequestLimits, check_at_most
from shardstream.service.node.batching import DecodedBatch
from shardstream.service.node.bulk_listener import BulkConnection, BulkListener
from shardstream.service.node.fair_queue import FairQueue
from shardstream.service.node.shared_slots import StreamSlots
from shardstream.service.node.step_source import Served, StepSource
from shardstream.service.node_messages import JobServed
from shardstream.service.server_options import SERVER_OPTIONS
from shardstream.service.tls import TlsFiles, credentials_from

log = logging.getLogger(__name__)

# A want read from a stream, where its batch goes, and its decoding (queued at once).
_Wanted = tuple[pb.Want, Allocate, "asyncio.Task[DecodedBatch]"]


class _Wake:
    """Put in a stream's queue of wants to make its serving loop look at the drain flag."""


_WAKE = _Wake()
_Queued = _Wanted | BaseException | _Wake | None
# Wants of one stream queued for decoding at once; beyond it the stream reads no more until one
# is sent. The rank's window bounds them first (a few batches).
PIPELINED_WANTS = 8


class BatchServer:
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
        self._bulk: BulkListener | None = None  # the bulk port (bulk_listener.py)
        self._draining = False  # the pool is giving this actor back (drain)
        self._queues: set[asyncio.Queue[_Queued]] = set()  # each open stream's wants (the loop's thread only)
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

    def _sent(self, opened: pb.FetchOpen, step: int, decoded: DecodedBatch, nbytes: int) -> None:
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
                self._bulk = BulkListener(host, [p for p in ports if p != self.port] or [0], self._tls)
                self._bulk.start()
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
        self._draining = True
        for queue in self._queues:  # an idle stream's loop is waiting for a want: wake it
            if not queue.full():
                queue.put_nowait(_WAKE)

    def stop(self, grace: float = 1.0) -> None:
        if self._bulk is not None:
            self._loop.call_soon_threadsafe(self._bulk.close)
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
            self._check_owner(identity, opened.job_id, context.peer())
            check_at_most("epoch", opened.epoch, RequestLimits(epoch=self._max_epoch), "epoch")
            loop = asyncio.get_running_loop()
            stream = (opened.job_id, opened.rank)
            self._open[stream] += 1
            try:
                async for message in self._serve(requests, opened, loop, identity, context.peer()):
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

    def _check_owner(self, identity: Identity | None, job_id: str, peer: str) -> None:
        """PermissionDenied unless the job was opened by the stream's identity (a job this actor does
        not hold passes here: decoding it says JobNotFound)."""
        if identity is None:
            return
        owner = self._steps.job_owner(job_id)
        if owner is not None and owner != identity.name:
            raise self.refusals.refuse(
                PermissionDenied, identity.name, "job", f"identity {identity.name!r} may not fetch batches of job "
                f"{job_id!r}: another identity opened it", peer)

    async def _serve(self, requests: AsyncIterator[Any], opened: pb.FetchOpen, loop: asyncio.AbstractEventLoop,
                     identity: Identity | None = None, peer: str = "") -> AsyncIterator[bytes]:
        """The batches of one opened stream, one per want, in the order asked."""
        slots = StreamSlots()  # the rank's shared-memory slots, when it offers them (shared_slots.py)
        token = b""  # the stream's bulk socket, when the rank takes one (bulk_listener.py)
        connection: BulkConnection | None = None
        sending: asyncio.Task[None] | None = None  # the last frame going out on it
        # The wants read so far, each already queued for decoding (in its job's turn), in order.
        wants: asyncio.Queue[_Queued] = asyncio.Queue(PIPELINED_WANTS)
        reading: asyncio.Task[None] | None = None
        try:
            if opened.bulk:  # answered either way: the rank holds its wants until it knows
                offer = self._bulk.offer() if self._bulk is not None else BulkOffer(0, b"")
                token = offer.token
                yield encode_bulk_offer(offer)
            reading = loop.create_task(self._read_wants(requests, opened, slots, wants, loop, identity, peer))
            self._queues.add(wants)
            while True:
                if self._draining and wants.empty():  # every want it accepted is sent
                    await _sent(sending)
                    raise DecoderDraining(f"decoder {self.address} is being given back (the service's scaling "
                                          "policy drains it): it sent every batch it had accepted")
                item = await wants.get()
                if item is None:
                    break
                if isinstance(item, _Wake):
                    continue
                if isinstance(item, BaseException):
                    raise item
                want, allocate, decoding = item
                decoded = await decoding
                message = decoded.message  # framed where it was decoded: no copy here
                if message is None:
                    message = encode_batch(opened.epoch, opened.rank, want.step, decoded.arrays, decoded.indices,
                                           decoded.replaced, allocate)
                size = message.size if isinstance(message, SharedRef) else len(message)
                if want.max_bytes and size > want.max_bytes:  # the rank wants it again when it has room
                    del decoded, message
                    yield encode_needs_room(opened.epoch, opened.rank, want.step, size)
                    continue
                if isinstance(message, SharedRef):
                    message = encode_shared(opened.epoch, opened.rank, want.step, message)
                elif want.bulk:
                    if not token or self._bulk is None:
                        raise StreamProtocolError("a want asked for its batch on a bulk socket this stream did "
                                                  "not offer (open the stream with bulk first)")
                    connection = connection or await self._bulk.attached(token)
                    await _sent(sending)  # frames go out whole, one after another, in the order wanted
                    sending = loop.create_task(_send(connection, message))
                    message = encode_bulk(opened.epoch, opened.rank, want.step, size)
                self._sent(opened, want.step, decoded, size)
                del decoded
                yield message
            await _sent(sending)  # the last frame, before the socket closes
        finally:
            self._queues.discard(wants)
            if reading is not None:
                reading.cancel()
            _cancel_waiting(wants)
            if sending is not None and not sending.done():
                sending.cancel()
            elif sending is not None and not sending.cancelled():
                sending.exception()  # retrieved: the stream's end already says what went wrong
            if token and self._bulk is not None:
                self._bulk.withdraw(token)
            try:  # after any decode still running for this stream: its fds must not be reused under it
                self._decoder.submit(opened.job_id, self._steps.job_weight(opened.job_id), slots.close)
            except RuntimeError:  # the server is stopping, and the process with it
                pass

    async def _read_wants(self, requests: AsyncIterator[Any], opened: pb.FetchOpen, slots: StreamSlots,
                          wants: asyncio.Queue[_Queued],
                          loop: asyncio.AbstractEventLoop, identity: Identity | None = None, peer: str = "") -> None:
        """Read the stream's wants as they come and queue each one's decoding at once, so a rank's
        wants wait in its job's queue (fair_queue.py) while earlier batches are being sent; None
        at the end, or what went wrong, in order. Each want is checked against the job's owner: the
        job may have reached this actor after the stream opened."""
        try:
            async for control in requests:
                if not isinstance(control, pb.FetchControl) or control.WhichOneof("kind") != "want":
                    raise StreamProtocolError("a FetchBatches stream takes one 'open' message, then wants")
                want = control.want
                if self._draining:  # not accepted: the rank asks another decoder for it
                    await wants.put(_WAKE)
                    continue
                self._check_owner(identity, opened.job_id, peer)
                if want.max_bytes < 0:
                    raise StreamProtocolError(f"a want's max_bytes must be >= 0 (0: no limit), got {want.max_bytes}")
                if want.HasField("data_stall"):  # the rank's, for the service's status and metrics
                    with self._served_lock:
                        job = self._served.jobs.setdefault(opened.job_id, JobServed())
                        job.stalls[opened.rank] = (want.data_stall, time.time())
                allocate = slots.allocator(want.slot) if want.slot else writable_bytes
                decoding = loop.create_task(self._decode(opened, want.step, allocate, loop))
                await wants.put((want, allocate, decoding))
            await wants.put(None)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # raised by the serving loop, after the batches wanted before it
            await wants.put(exc)

    async def _decode(self, opened: pb.FetchOpen, step: int, allocate: Allocate,
                      loop: asyncio.AbstractEventLoop) -> DecodedBatch:
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


def _cancel_waiting(wants: asyncio.Queue[_Queued]) -> None:
    """The stream ended: its wants' decoding that has not started will not."""
    while not wants.empty():
        item = wants.get_nowait()
        if isinstance(item, tuple):
            decoding = item[2]
            if not decoding.done():
                decoding.cancel()
            elif not decoding.cancelled():
                decoding.exception()  # retrieved: the stream's end already says what went wrong


async def _send(connection: BulkConnection, frame: bytes) -> None:
    try:
        await connection.send(frame)
    except OSError as exc:
        raise ServiceUnavailable(f"the rank's bulk socket failed while sending a batch: {exc}") from None


async def _sent(sending: asyncio.Task[None] | None) -> None:
    """Wait for a frame to be sent (raising what sending it raised)."""
    if sending is not None:
        await sending


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
