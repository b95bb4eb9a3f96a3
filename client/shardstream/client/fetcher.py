"""One rank's batches of one epoch, fetched from many decoders' batch servers at once.

The direct data plane (docs/data-plane.md). One FetchBatches stream per
decoder, each with a thread that receives and converts batches to tensors
(a view, or the one copy into pinned memory) off the training loop. The step
scheduler (scheduler.py) decides which step each decoder is asked for:
least-loaded, within the window in batches and bytes across all decoders.
A decoder whose stream fails has its steps asked of the others; a late
answer from it is dropped, so every step reaches the loop once, in order. A
connection a network black-holes fails by the channel's keepalive (a ping
unanswered: UNAVAILABLE within keepalive time + timeout, connection.py). A
decoder that is merely busy (many ranks queue on it) answers pings from
gRPC's own threads, so it keeps its steps: no timer here tells the two apart
by silence, which would drop every decoder of a loaded cluster at once.
Decoders that join mid-epoch (a decode node added) are picked up: every
DECODERS_REFRESH_S the fetcher asks the service for the job's decoders again
and opens streams to new ones. When every decoder has failed, the loader
reopens the job (which lists the decoders alive now) and continues at its
next step.

A decoder on the rank's own host writes batches into shared-memory slots the
rank offers instead of sending them (shared_slots.py); the stream then
carries only which slot holds which step. A decoder on another host sends
batch bytes on a bulk socket beside the stream (bulk_socket.py), which then
carries only each step's size; the bytes land in the loader's receive
buffers (receive_buffers.py), which its window bounds.

Iterate for (header, tensors) in step order (asking for the next one returns
the last one's room in the window), and close().
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import grpc

from shardstream.client.channels import DecoderChannels, host_of
from shardstream.client.decoder_stream import (
    DecoderStream,
    FetchTarget,
    describe_failure,
    drained,
    sender_failure,
)
from shardstream.client.placement import StepPlacement
from shardstream.client.receive_buffers import ReceiveBuffers
from shardstream.client.scheduler import StepScheduler
from shardstream.client.shared_slots import SlotPool, is_local_address, shared_memory_available
from shardstream.client.shutdown import track_stream, untrack_stream
from shardstream.client.stats import LoaderStats
from shardstream.client.tensors import Batch, batch_nbytes
from shardstream.proto import DECODERS_REFRESH_S
from shardstream.proto.errors import (
    DeadlineExceeded,
    ServiceUnavailable,
    ShardstreamError,
    StreamProtocolError,
    from_rpc_error,
)
from shardstream.proto.wire import BatchView

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BatchHeader:
    """What the loop checks of a batch; the message's bytes are dropped once converted."""

    epoch: int
    step: int
    replaced_samples: int
    sample_indices: tuple[int, ...] = ()  # global, in batch order


Converted = tuple[BatchHeader, Batch]

class ListingClock:
    """When a rank last asked the service for its job's decoders. Each epoch's fetcher refreshes
    first when the interval since then has passed, then every DECODERS_REFRESH_S, so epochs
    shorter than the interval still see decoders that joined."""

    def __init__(self) -> None:
        self._at = time.monotonic()

    def listed(self) -> None:
        self._at = time.monotonic()

    def next_in_s(self) -> float:
        return max(0.0, DECODERS_REFRESH_S - (time.monotonic() - self._at))


class DirectPrefetcher:
    def __init__(self, addresses: list[str], target: FetchTarget, window_batches: int, window_bytes: int,
                 convert: Callable[[BatchView], Batch], timeout_s: float, describe: str,
                 channels: DecoderChannels, stats: LoaderStats | None = None,
                 list_decoders: Callable[[], Sequence[str]] | None = None, shared_memory: bool = True,
                 bulk: bool = True, data_stall: Callable[[], float | None] = lambda: None,
                 listing: ListingClock | None = None, receive_buffers: ReceiveBuffers | None = None) -> None:
        if not addresses:
            raise ServiceUnavailable(f"{describe}: the service lists no decoder to fetch batches from (no decode "
                                     "node has joined its Ray cluster yet, or its actors are still starting)")
        self._target = target
        self._stats = stats or LoaderStats()
        self._convert = convert
        self._timeout_s = timeout_s
        self._describe = describe
        self._cond = threading.Condition()
        self._scheduler = StepScheduler(target.start_step, target.end_step, window_batches, window_bytes,
                                        per_sender=window_batches,
                                        placement=StepPlacement(target.placement, host_of),
                                        batch_bytes_hint=self._stats.largest_batch_bytes)
        self._ready: dict[int, Converted] = {}
        self._error: BaseException | None = None
        self._closed = False
        self._senders: dict[str, DecoderStream] = {}
        self._channels = channels
        self._stop = threading.Event()
        self._last_failure = ""
        self._shared_memory = shared_memory and shared_memory_available()
        self._bulk = bulk
        # What bulk sockets receive into: the loader's, kept across epochs (receive_buffers.py)
        self._receive_buffers = receive_buffers or ReceiveBuffers(window_batches + 1)
        self._data_stall = data_stall  # the rank's stall now, sent with its wants (stall.py)
        for address in addresses:
            self._add_sender(address)
        if list_decoders is not None:
            threading.Thread(target=self._refresh, args=(list_decoders, listing or ListingClock()), daemon=True,
                             name=f"shardstream-decoders {describe}").start()
        track_stream(self)

    def _add_sender(self, address: str) -> None:
        """Open a stream to a decoder not seen before in this epoch (holding the lock, or in __init__).
        One that failed stays dropped: it is listed until the service notices, and may still be
        black-holed."""
        if address in self._senders:
            return
        slots = SlotPool() if self._shared_memory and is_local_address(address) else None
        bulk = self._receive_buffers if self._bulk and slots is None else None
        sender = DecoderStream(address, self._target, self._channels, slots, bulk_buffers=bulk,
                               timeout_s=self._timeout_s)
        self._senders[address] = sender
        self._scheduler.add_sender(address)
        sender.thread = threading.Thread(target=self._receive, args=(sender,), daemon=True,
                                         name=f"shardstream-fetch {address} {self._describe}")
        sender.thread.start()

    def _refresh(self, list_decoders: Callable[[], Sequence[str]], listing: ListingClock) -> None:
        """Draw on decoders that joined since the epoch began (a decode node added), on the rank's
        listing clock. In the background: a service that does not answer never holds the loop."""
        while not self._stop.wait(listing.next_in_s()):
            try:
                addresses = list_decoders()
                listing.listed()
            except Exception as exc:  # the service restarting: the streams go on without it
                log.debug("%s: cannot list decoders now (%s)", self._describe, exc)
                continue
            with self._cond:
                if self._closed:
                    return
                new = [a for a in addresses if a not in self._senders]
                for address in new:
                    self._add_sender(address)
                if new:
                    log.info("%s: fetching from %d decoder(s) that joined: %s", self._describe, len(new), new)
                    self._cond.notify_all()

    def _receive(self, sender: DecoderStream) -> None:
        failure: BaseException | None = None
        try:
            for announced in sender.call:
                view = sender.unwrap(announced)
                if view is None:
                    continue
                if view.needs_room:  # more than the room its want had: wanted again when there is
                    with self._cond:
                        self._scheduler.needs_room(sender.address, view.step, view.needs_room)
                        self._stats.steps_waited_for_room += 1
                        self._cond.notify_all()
                    continue
                shared, bulk = announced.shared is not None, announced.bulk_size > 0
                del announced
                header = BatchHeader(view.epoch, view.step, view.replaced_samples, view.sample_indices)
                converted = (header, self._convert(view))
                nbytes = batch_nbytes(converted[1])
                del view  # the tensors keep what they need of the message
                with self._cond:
                    if self._scheduler.received(sender.address, converted[0].step, nbytes):
                        self._stats.largest_batch_bytes = self._scheduler.largest_batch
                        self._stats.shared_batches += shared
                        self._stats.bulk_batches += bulk
                        self._ready[converted[0].step] = converted
                        self._cond.notify_all()
                del converted
            failure = ConnectionError("the stream ended")
        except Exception as exc:
            if isinstance(exc, ShardstreamError) or not isinstance(exc, (grpc.RpcError, OSError)):
                with self._cond:  # a message that does not convert: this rank cannot go on
                    self._error = self._error or exc
                    self._cond.notify_all()
                return
            failure = exc  # the stream failed, or its bulk socket did
        with self._cond:
            if self._closed:
                return
            if isinstance(failure, grpc.RpcError) and not sender_failure(failure):
                self._error = self._error or from_rpc_error(failure)  # the request is wrong: say so
            else:
                self._drop(sender.address, describe_failure(failure), drained(failure))
            self._cond.notify_all()

    def _drop(self, address: str, why: str, drained: bool = False) -> None:
        """Give a failed or drained decoder's steps to the others (holding the lock)."""
        if address not in self._scheduler.senders:
            return  # dropped already
        lost = self._scheduler.failed(address)
        self._last_failure = f"{address}: {why}"
        self._stats.steps_refetched += len(lost)
        if drained:  # the service gave it back: it sent what it had accepted
            self._stats.decoders_drained += 1
            log.info("%s: decoder %s was drained; steps it had not accepted (%s) go to the others",
                     self._describe, address, lost)
            return
        self._stats.decoders_lost += 1
        log.warning("%s: decoder %s failed (%s); its steps %s go to the others", self._describe, address, why,
                    lost)

    def _dispatch(self) -> None:
        """Ask decoders for what the window allows (holding the lock). Each want carries the
        rank's data stall: the decoders keep the latest for the service's status and metrics."""
        stall = self._data_stall()  # a few floating point operations
        for request in self._scheduler.requests():
            self._stats.steps_at_home += request.home
            self._senders[str(request.sender)].want(request.step, request.max_bytes, stall)

    def __iter__(self) -> Iterator[Converted]:
        handed: int | None = None
        while True:
            with self._cond:
                if handed is not None:
                    self._scheduler.consumed(handed)  # the loop asks for the next: it is done with this
                    handed = None
                deadline = time.monotonic() + self._timeout_s
                while True:
                    if self._error is not None:
                        raise self._error if isinstance(self._error, ShardstreamError) else StreamProtocolError(
                            f"{self._describe}: {self._error}")
                    step = self._scheduler.pop_ready()
                    if step is not None:
                        item = self._ready.pop(step)
                        break
                    if self._scheduler.finished:
                        return
                    if not self._scheduler.senders:
                        raise ServiceUnavailable(f"{self._describe}: every decoder it fetched from failed "
                                                 f"(the last: {self._last_failure})")
                    self._dispatch()
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise DeadlineExceeded(
                            f"no batch for {self._describe} within {self._timeout_s:.0f} s (steps outstanding "
                            f"at the decoders: {self._scheduler.outstanding or 'none'})")
                    self._cond.wait(min(remaining, 1.0))
                self._dispatch()
            handed = step
            yield item
            del item

    def close(self) -> None:
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
        self._stop.set()
        untrack_stream(self)
        for sender in self._senders.values():
            sender.close()


__all__ = ["BatchHeader", "Converted", "DirectPrefetcher", "ListingClock"]
