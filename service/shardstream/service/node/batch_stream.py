"""One FetchBatches stream on a decode actor's batch port: wants read and queued, batches sent in order.

The batch server (batch_server.py) admits a stream and hands it here. Each want the rank sends is
queued for decoding at once, so it waits in its job's turn (fair_queue.py) while earlier batches
are being sent; the batches go back in the order wanted, each as the small message naming the
rank's shared-memory slot it was framed into (shared_slots.py), on the rank's bulk socket
(bulk_listener.py), or on the stream itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

from shardstream.proto.errors import DecoderDraining, ServiceUnavailable, StreamProtocolError
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
from shardstream.service.identities import Identity
from shardstream.service.node.batching import DecodedBatch
from shardstream.service.node.bulk_listener import BulkConnection, BulkListener
from shardstream.service.node.shared_slots import StreamSlots

# A want read from a stream, where its batch goes, and its decoding (queued at once).
_Wanted = tuple[pb.Want, Allocate, "asyncio.Task[DecodedBatch]"]


class _Wake:
    """Put in a stream's queue of wants to make its serving loop look at the drain flag."""


_WAKE = _Wake()
Queued = _Wanted | BaseException | _Wake | None
# Wants of one stream queued for decoding at once; beyond it the stream reads no more until one
# is sent. The rank's window bounds them first (a few batches).
PIPELINED_WANTS = 8


class StreamHost(Protocol):
    """What a stream needs of the batch server that admitted it."""

    address: str
    draining: bool  # the pool is giving the actor back: no more wants are accepted
    bulk: BulkListener | None  # the bulk port, when there is one
    streams: set[asyncio.Queue[Queued]]  # each open stream's wants (woken when draining starts)

    def check_owner(self, identity: Identity | None, job_id: str, peer: str) -> None: ...

    async def decode(self, opened: pb.FetchOpen, step: int, allocate: Allocate) -> DecodedBatch: ...

    def record_stall(self, opened: pb.FetchOpen, stall: float) -> None: ...

    def record_sent(self, opened: pb.FetchOpen, step: int, decoded: DecodedBatch, nbytes: int) -> None: ...

    def after_decoding(self, job_id: str, fn: Callable[[], Any]) -> None: ...


def wake(wants: asyncio.Queue[Queued]) -> None:
    """Make an idle stream's loop, waiting for a want, look at the drain flag."""
    if not wants.full():
        wants.put_nowait(_WAKE)


async def serve_stream(host: StreamHost, requests: AsyncIterator[Any], opened: pb.FetchOpen,
                       identity: Identity | None = None, peer: str = "") -> AsyncIterator[bytes]:
    """The batches of one opened stream, one per want, in the order asked."""
    loop = asyncio.get_running_loop()
    slots = StreamSlots()  # the rank's shared-memory slots, when it offers them (shared_slots.py)
    token = b""  # the stream's bulk socket, when the rank takes one (bulk_listener.py)
    connection: BulkConnection | None = None
    sending: asyncio.Task[None] | None = None  # the last frame going out on it
    # The wants read so far, each already queued for decoding (in its job's turn), in order.
    wants: asyncio.Queue[Queued] = asyncio.Queue(PIPELINED_WANTS)
    reading: asyncio.Task[None] | None = None
    try:
        if opened.bulk:  # answered either way: the rank holds its wants until it knows
            offer = host.bulk.offer() if host.bulk is not None else BulkOffer(0, b"")
            token = offer.token
            yield encode_bulk_offer(offer)
        reading = loop.create_task(_read_wants(host, requests, opened, slots, wants, identity, peer))
        host.streams.add(wants)
        while True:
            if host.draining and wants.empty():  # every want it accepted is sent
                await _sent(sending)
                raise DecoderDraining(f"decoder {host.address} is being given back (the service's scaling "
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
                if not token or host.bulk is None:
                    raise StreamProtocolError("a want asked for its batch on a bulk socket this stream did "
                                              "not offer (open the stream with bulk first)")
                connection = connection or await host.bulk.attached(token)
                await _sent(sending)  # frames go out whole, one after another, in the order wanted
                sending = loop.create_task(_send(connection, message))
                message = encode_bulk(opened.epoch, opened.rank, want.step, size)
            host.record_sent(opened, want.step, decoded, size)
            del decoded
            yield message
        await _sent(sending)  # the last frame, before the socket closes
    finally:
        host.streams.discard(wants)
        if reading is not None:
            reading.cancel()
        _cancel_waiting(wants)
        if sending is not None and not sending.done():
            sending.cancel()
        elif sending is not None and not sending.cancelled():
            sending.exception()  # retrieved: the stream's end already says what went wrong
        if token and host.bulk is not None:
            host.bulk.withdraw(token)
        try:  # after any decode still running for this stream: its fds must not be reused under it
            host.after_decoding(opened.job_id, slots.close)
        except RuntimeError:  # the server is stopping, and the process with it
            pass


async def _read_wants(host: StreamHost, requests: AsyncIterator[Any], opened: pb.FetchOpen, slots: StreamSlots,
                      wants: asyncio.Queue[Queued], identity: Identity | None = None, peer: str = "") -> None:
    """Read the stream's wants as they come and queue each one's decoding at once, so a rank's
    wants wait in its job's queue (fair_queue.py) while earlier batches are being sent; None
    at the end, or what went wrong, in order. Each want is checked against the job's owner: the
    job may have reached this actor after the stream opened."""
    loop = asyncio.get_running_loop()
    try:
        async for control in requests:
            if not isinstance(control, pb.FetchControl) or control.WhichOneof("kind") != "want":
                raise StreamProtocolError("a FetchBatches stream takes one 'open' message, then wants")
            want = control.want
            if host.draining:  # not accepted: the rank asks another decoder for it
                await wants.put(_WAKE)
                continue
            host.check_owner(identity, opened.job_id, peer)
            if want.max_bytes < 0:
                raise StreamProtocolError(f"a want's max_bytes must be >= 0 (0: no limit), got {want.max_bytes}")
            if want.HasField("data_stall"):  # the rank's, for the service's status and metrics
                host.record_stall(opened, want.data_stall)
            allocate = slots.allocator(want.slot) if want.slot else writable_bytes
            decoding = loop.create_task(host.decode(opened, want.step, allocate))
            await wants.put((want, allocate, decoding))
        await wants.put(None)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # raised by the serving loop, after the batches wanted before it
        await wants.put(exc)


def _cancel_waiting(wants: asyncio.Queue[Queued]) -> None:
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


__all__ = ["PIPELINED_WANTS", "Queued", "StreamHost", "serve_stream", "wake"]
