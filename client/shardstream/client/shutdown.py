"""Closing the streams and channels still open when the interpreter exits, while threads still run.

A loader left mid-epoch without ``close()`` would otherwise be torn down by the
garbage collector during interpreter shutdown. By then Python has stopped its
daemon threads where they stood, gRPC's included, and one may have stopped
holding a call's lock: the call's cleanup then waits for that lock forever and
the process never exits. An atexit hook runs before that point, so it cancels
the streams, closes the channels and collects what they leave behind while
every thread can still finish.
"""

from __future__ import annotations

import atexit
import gc
import weakref
from typing import Protocol


class _Closable(Protocol):
    def close(self) -> None: ...


_STREAMS: weakref.WeakSet[_Closable] = weakref.WeakSet()
_CHANNELS: weakref.WeakSet[_Closable] = weakref.WeakSet()


def track_stream(stream: _Closable) -> None:
    _STREAMS.add(stream)


def untrack_stream(stream: _Closable) -> None:
    _STREAMS.discard(stream)


def track_channel(channel: _Closable) -> None:
    _CHANNELS.add(channel)


def untrack_channel(channel: _Closable) -> None:
    _CHANNELS.discard(channel)


@atexit.register
def close_all() -> None:
    if not _STREAMS and not _CHANNELS:
        return
    for stream in list(_STREAMS):
        stream.close()
    for channel in list(_CHANNELS):
        channel.close()
    gc.collect()  # gRPC call objects sit in reference cycles: free them now, not at shutdown


__all__ = ["close_all", "track_channel", "track_stream", "untrack_channel", "untrack_stream"]
