"""One gRPC channel per decoder, kept for the loader's life (the direct data plane).

Each epoch opens new FetchBatches streams, but on the channels of the epochs
before: a new channel per decoder per epoch would cost a TCP (and TLS)
handshake and a cold HTTP/2 connection at every epoch boundary, on every rank.
What it learned of a decoder stays too: a bulk port it could not reach is not
tried again (bulk_socket.py).
Channels of decoders the job no longer lists are closed when an epoch starts.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence

import grpc

from shardstream.client.auth import Metadata, Token, call_metadata
from shardstream.client.tls import TLS, open_channel


def host_of(address: str) -> str:
    """The host of a ``host:port`` (brackets of an IPv6 literal removed)."""
    return address.rsplit(":", 1)[0].strip("[]")


class DecoderChannels:
    def __init__(self, tls: TLS | None, options: Sequence[tuple[str, object]], token: Token | None = None) -> None:
        self.tls = tls
        self.token = token  # sent with every stream (auth.py)
        self.bulk_unreachable: set[str] = set()  # decoders whose bulk port refused or timed out
        self._options = list(options)
        self._channels: dict[str, grpc.Channel] = {}
        self._lock = threading.Lock()

    def get(self, address: str) -> grpc.Channel:
        with self._lock:
            channel = self._channels.get(address)
            if channel is None:
                channel = self._channels[address] = open_channel(address, self.tls, self._options)
            return channel

    def call_metadata(self) -> Metadata | None:
        """The metadata of a stream to a decoder: the token, read now (a rotated file is picked up)."""
        return call_metadata(self.token)

    def keep_only(self, addresses: Iterable[str]) -> None:
        """Close the channels of decoders not among `addresses` (gone from the job's list)."""
        wanted = set(addresses)
        with self._lock:
            gone = [a for a in self._channels if a not in wanted]
            closing = [self._channels.pop(a) for a in gone]
        for channel in closing:
            channel.close()

    def close(self) -> None:
        self.keep_only(())


__all__ = ["DecoderChannels", "host_of"]
