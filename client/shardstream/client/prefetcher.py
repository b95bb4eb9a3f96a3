"""One batch stream: a background thread receives and converts, the loop dequeues and returns credit.

The thread turns each message into tensors as it arrives (a view, or the
one copy into pinned memory), off the training loop. The service never has
more than the stream's window (batches and bytes) sent and not yet consumed,
so the queue here is bounded by that window. Credit for a batch goes back when the
loop asks for the next one, so the window also covers the batch in the
loop's hands. Every wait has a deadline; errors surface as typed errors;
``close()`` ends the request stream, cancels the RPC and joins the thread
(a daemon, so it never keeps a process alive). Streams still open when the
interpreter exits are closed before shutdown (shutdown.py).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
import torch

from shardstream.client.shutdown import track_stream, untrack_stream
from shardstream.proto.errors import DeadlineExceeded, ShardstreamError, from_rpc_error
from shardstream.proto.v1 import loader_pb2 as pb
from shardstream.proto.wire import BatchView

log = logging.getLogger(__name__)



@dataclass(frozen=True)
class BatchHeader:
    """What the loop checks of a batch; the message's bytes are dropped once copied."""

    epoch: int
    step: int
    replaced_samples: int


Converted = tuple[BatchHeader, dict[str, torch.Tensor]]


@dataclass
class _End:
    error: BaseException | None = None


T = TypeVar("T")


def until_none(messages: queue.Queue[T | None]) -> Iterator[T]:
    """A request stream fed from a queue; putting None ends it."""
    while True:
        message = messages.get()
        if message is None:
            return
        yield message


class StreamPrefetcher:
    def __init__(self, stream: Callable[[Iterator[pb.StreamControl]], Any], open_request: pb.StreamBatchesRequest,
                 convert: Callable[[BatchView], dict[str, torch.Tensor]], timeout_s: float, describe: str) -> None:
        self._controls: queue.Queue[pb.StreamControl | None] = queue.Queue()
        self._controls.put(pb.StreamControl(open=open_request))
        self._received: queue.Queue[Converted | _End] = queue.Queue()
        self._convert = convert
        self._timeout_s = timeout_s
        self._describe = describe
        self._closed = threading.Event()
        self._call = stream(until_none(self._controls))
        self._thread = threading.Thread(target=self._receive, name=f"shardstream-receive {describe}",
                                        daemon=True)
        self._thread.start()
        track_stream(self)

    def _receive(self) -> None:
        end = _End()
        try:
            for view in self._call:
                header = BatchHeader(view.epoch, view.step, view.replaced_samples)
                self._received.put((header, self._convert(view)))
                del view  # the tensors keep what they need of the message
        except grpc.RpcError as exc:
            if not self._closed.is_set():
                end = _End(from_rpc_error(exc))
        except Exception as exc:
            end = _End(exc)
        self._received.put(end)

    def credit(self, consumed_step: int) -> None:
        """The loop has taken every batch up to and including `consumed_step`."""
        self._controls.put(pb.StreamControl(credit=pb.Credit(consumed_step=consumed_step)))

    def __iter__(self) -> Iterator[Converted]:
        while True:
            try:
                item = self._received.get(timeout=self._timeout_s)
            except queue.Empty:
                raise DeadlineExceeded(
                    f"no batch for {self._describe} within {self._timeout_s:.0f} s "
                    "(is the service overloaded or its decoders stuck?)"
                ) from None
            if isinstance(item, _End):
                if item.error is not None:
                    if isinstance(item.error, ShardstreamError):
                        raise item.error
                    raise ShardstreamError(f"{self._describe}: {item.error}") from item.error
                return
            step = item[0].step
            yield item
            # The loop asks for the next batch, so it is done with this one: drop it, then return
            # its credit. Nothing here outlives its credit, so the window bounds what is alive.
            del item
            self.credit(step)

    def close(self) -> None:
        if self._closed.is_set():
            return
        untrack_stream(self)
        self._closed.set()
        self._controls.put(None)
        self._call.cancel()
        self._thread.join(timeout=5.0)
        if self._thread.is_alive():
            log.warning("%s did not stop within 5 s", self._thread.name)


__all__ = ["BatchHeader", "Converted", "StreamPrefetcher", "until_none"]
