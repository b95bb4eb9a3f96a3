"""One decoder's FetchBatches stream for one epoch of one rank, and what its failures mean.

Wants go out from a queue (the request stream), batches come back on the
fetcher's thread for it (fetcher.py). A batch arrives in the message itself, in
a shared-memory slot the rank offered with the want (a decoder on this host,
shared_slots.py), or on a bulk socket beside the stream (a decoder on another
host, bulk_socket.py); each is checked to be the step the stream announced.
"""

from __future__ import annotations

import collections
import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TypeVar

import grpc

from shardstream.client import bulk_socket
from shardstream.client.bulk_socket import BulkSocket
from shardstream.client.channels import DecoderChannels
from shardstream.client.receive_buffers import ReceiveBuffers
from shardstream.client.shared_slots import SlotPool
from shardstream.proto import FETCH_BATCHES_METHOD, PROTOCOL_VERSION
from shardstream.proto.errors import (
    DecoderDraining,
    JobNotFound,
    ServiceUnavailable,
    from_rpc_error,
)
from shardstream.proto.v1 import loader_pb2 as pb
from shardstream.proto.wire import BatchView, BulkOffer, WireError, parse_batch


@dataclass(frozen=True)
class FetchTarget:
    """What one epoch's fetch is for."""

    job_id: str
    epoch: int
    rank: int
    start_step: int
    end_step: int
    placement: str = ""  # what the step numbers stand for (placement.py): world size, batch size, rank


T = TypeVar("T")


def until_none(messages: queue.Queue[T | None]) -> Iterator[T]:
    """A request stream fed from a queue; putting None ends it."""
    while True:
        message = messages.get()
        if message is None:
            return
        yield message

# Codes that mean "this decoder cannot serve now" (gone, restarting, not yet told of the job),
# not "this request is wrong": its steps go to the other decoders.
SENDER_FAILURES = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED, grpc.StatusCode.DEADLINE_EXCEEDED,
                   grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL}


class DecoderStream:
    """One decoder's FetchBatches stream: wants go out from a queue, batches come back on a thread."""

    def __init__(self, address: str, target: FetchTarget, channels: DecoderChannels, slots: SlotPool | None,
                 bulk_buffers: ReceiveBuffers | None, timeout_s: float) -> None:
        self.address = address
        self.slots = slots  # offered with each want when the decoder is on this host
        self._bulk_buffers = bulk_buffers  # what a bulk socket receives into; None: batches on the stream
        self.offered: collections.deque[str] = collections.deque()  # one per want, in order
        self.bulk: BulkSocket | None = None  # once connected, wants ask for their batches on it
        self._channels = channels
        self._timeout_s = timeout_s
        self.wants: queue.Queue[pb.FetchControl | None] = queue.Queue()
        wants_bulk = bulk_buffers is not None and address not in channels.bulk_unreachable
        self.wants.put(pb.FetchControl(open=pb.FetchOpen(
            protocol_version=PROTOCOL_VERSION, job_id=target.job_id, epoch=target.epoch, rank=target.rank,
            bulk=wants_bulk)))
        # Until the decoder's answer to `bulk` (its offer) is taken up, wants wait here, so that
        # every batch can come on the bulk socket.
        self._lock = threading.Lock()
        self._held: list[pb.Want] | None = [] if wants_bulk else None
        # the loader's channel, kept across epochs (channels.py)
        fetch = channels.get(address).stream_stream(
            FETCH_BATCHES_METHOD, request_serializer=pb.FetchControl.SerializeToString,
            response_deserializer=parse_batch)
        self.call = fetch(until_none(self.wants), metadata=channels.call_metadata())
        self.thread: threading.Thread | None = None
        self._closed = False

    def want(self, step: int, max_bytes: int, data_stall: float | None = None) -> None:
        slot = self.slots.offer() if self.slots is not None else ""
        self.offered.append(slot)
        want = pb.Want(step=step, max_bytes=max_bytes, slot=slot, data_stall=data_stall)
        with self._lock:
            if self._held is not None:
                self._held.append(want)
                return
            want.bulk = self.bulk is not None
            self.wants.put(pb.FetchControl(want=want))

    def unwrap(self, view: BatchView) -> BatchView | None:
        """The batch itself: `view`, or the one in shared memory or on the bulk socket it names.
        None for the stream's bulk offer, which this takes up."""
        if view.bulk_offer is not None:
            self._connect_bulk(view.bulk_offer)
            return None
        slot = self.offered.popleft() if self.offered else ""
        if view.bulk_size:
            if self.bulk is None:
                raise WireError(f"decoder {self.address} sent step {view.step} on a bulk socket this rank "
                                "has not connected")
            return _same_batch(view, parse_batch(self.bulk.receive(view.bulk_size).data), "its bulk socket")
        if view.shared is None:
            if slot and self.slots is not None:
                self.slots.declined(slot)
            return view
        if self.slots is None or view.shared.slot != slot:
            raise WireError(f"decoder {self.address} wrote step {view.step} into slot {view.shared.slot!r}, "
                            f"but that want offered {slot or 'none'!r}")
        return _same_batch(view, parse_batch(self.slots.lease(view.shared).data), f"slot {slot!r}")

    def _connect_bulk(self, offer: BulkOffer) -> None:
        """Connect the socket the decoder offered (port 0: it has none), then send the wants held."""
        connected = None
        if offer.port and self._bulk_buffers is not None:
            connected = bulk_socket.connect(self.address, offer, self._channels.tls, self._timeout_s,
                                            self._bulk_buffers)
            if connected is None:
                self._channels.bulk_unreachable.add(self.address)
        if connected is not None and self._closed:
            connected.close()
            connected = None
        with self._lock:
            self.bulk = connected
            for want in self._held or ():
                want.bulk = connected is not None
                self.wants.put(pb.FetchControl(want=want))
            self._held = None

    def close(self) -> None:
        self._closed = True
        self.wants.put(None)
        self.call.cancel()
        if self.bulk is not None:
            self.bulk.close()
        if self.thread is not None:
            self.thread.join(timeout=5.0)
        if self.slots is not None:
            self.slots.close()


def _same_batch(announced: BatchView, batch: BatchView, where: str) -> BatchView:
    """`batch`, found in `where`, after checking it is the one the stream announced."""
    if (batch.epoch, batch.rank, batch.step) != (announced.epoch, announced.rank, announced.step):
        raise WireError(f"{where} holds step {batch.step} of epoch {batch.epoch} rank {batch.rank}, not step "
                        f"{announced.step} of epoch {announced.epoch} rank {announced.rank}")
    return batch


def sender_failure(exc: grpc.RpcError) -> bool:
    """Whether the steps of a decoder that failed with `exc` go to the others. A decoder that
    answered with a typed error has said why, and any decoder would repeat it (a bad file or
    sample, a changed file, a decode past decode_timeout_s, its own internal fault): it reaches
    the loop at once. Only failures of the link or the process (no typed error), a decoder
    stopping (ServiceUnavailable) or one not yet told of the job (JobNotFound) are retried."""
    error = from_rpc_error(exc)
    if error.from_service:
        return isinstance(error, (ServiceUnavailable, JobNotFound))
    return exc.code() in SENDER_FAILURES or isinstance(error, JobNotFound)  # type: ignore[attr-defined]


def describe_failure(failure: BaseException | None) -> str:
    if isinstance(failure, grpc.RpcError):
        return f"{failure.code().name}: {failure.details()}"  # type: ignore[attr-defined]
    return str(failure)


def drained(failure: BaseException | None) -> bool:
    """Whether the stream ended because the service gave its decoder back (DecoderDraining): not a
    failure, the decoder sent what it had accepted."""
    return isinstance(failure, grpc.RpcError) and isinstance(from_rpc_error(failure), DecoderDraining)


__all__ = ["SENDER_FAILURES", "DecoderStream", "FetchTarget", "describe_failure", "drained", "sender_failure",
           "until_none"]
