"""A background thread that drains one batch stream into a bounded queue.

The thread converts messages into (pinned) tensors off the training loop, so
the loop only dequeues. Every wait has a deadline; errors travel through the
queue and surface at the consumer as typed errors; ``close()`` cancels the
RPC and the thread is a daemon, so it never keeps a process alive.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import grpc
import torch

from shardstream.proto.errors import DeadlineExceeded, ShardstreamError, from_rpc_error
from shardstream.proto.v1 import loader_pb2 as pb

log = logging.getLogger(__name__)

_POLL_S = 0.1


@dataclass
class _End:
    error: BaseException | None = None


class StreamPrefetcher:
    def __init__(self, call: grpc.Call, convert: Callable[[pb.Batch], dict[str, torch.Tensor]],
                 depth: int, timeout_s: float, describe: str) -> None:
        self._call = call
        self._convert = convert
        self._queue: queue.Queue[tuple[pb.Batch, dict[str, torch.Tensor]] | _End] = queue.Queue(depth)
        self._timeout_s = timeout_s
        self._describe = describe
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"shardstream-prefetch {describe}",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        end = _End()
        try:
            for message in self._call:  # type: ignore[attr-defined]
                item = (message, self._convert(message))
                while not self._put(item):
                    if self._closed.is_set():
                        return
        except grpc.RpcError as exc:
            if not self._closed.is_set():
                end = _End(from_rpc_error(exc))
        except Exception as exc:
            end = _End(exc)
        while not self._put(end):
            if self._closed.is_set():
                return

    def _put(self, item: tuple[pb.Batch, dict[str, torch.Tensor]] | _End) -> bool:
        try:
            self._queue.put(item, timeout=_POLL_S)
            return True
        except queue.Full:
            return False

    def __iter__(self) -> Iterator[tuple[pb.Batch, dict[str, torch.Tensor]]]:
        while True:
            try:
                item = self._queue.get(timeout=self._timeout_s)
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
            yield item

    def close(self) -> None:
        self._closed.set()
        self._call.cancel()
        self._thread.join(timeout=5.0)
        if self._thread.is_alive():
            log.warning("prefetch thread for %s did not stop within 5 s", self._describe)


__all__ = ["StreamPrefetcher"]
