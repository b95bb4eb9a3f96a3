"""A rank's side of a bulk socket: batch bytes from a decoder straight into buffers the tensors view.

A decoder on another host sends batch bytes on a plain socket (TLS when its
ports speak TLS) beside the FetchBatches stream, which keeps the control:
each batch is announced there with its size, and its bytes follow here in
the same order (service/.../node/bulk_listener.py has the why). The rank
receives them with ``recv_into`` into a buffer of its own: no copy but the
kernel's. The buffers come from the loader's pool (receive_buffers.py),
shared by all its decoders and epochs and bounded by its window; a buffer is
reused once every tensor viewing its batch is gone, so a steady stream does
not fault in fresh pages for every batch.

A decoder whose bulk port cannot be reached (a firewall, a NetworkPolicy
that opens only the gRPC port) is remembered, and its batches come on the
stream as before.
"""

from __future__ import annotations

import logging
import socket

import numpy as np

from shardstream.client.channels import host_of
from shardstream.client.receive_buffers import ReceiveBuffers
from shardstream.client.tls import TLS
from shardstream.proto.wire import BulkOffer

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 5.0
WAKE_BYTES = 1 << 20
# The most ciphertext of one TLS record (RFC 8446 5.2: 2^14 + 256, and its 5-byte header): what the
# TLS layer may already have taken off the socket, part of a record, towards the bytes still due.
TLS_RECORD_BYTES = (1 << 14) + 256 + 5


class BulkSocket:
    """One stream's bulk socket, connected and joined to the stream by its token."""

    def __init__(self, host: str, offer: BulkOffer, tls: TLS | None, timeout_s: float,
                 buffers: ReceiveBuffers) -> None:
        sock = socket.create_connection((host, offer.port), timeout=CONNECT_TIMEOUT_S)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if tls is not None:
                sock = tls.ssl_context().wrap_socket(sock, server_hostname=tls.server_name or host)
            sock.sendall(offer.token)
            sock.settimeout(timeout_s)  # a batch announced on the stream whose bytes do not follow
        except BaseException:
            sock.close()
            raise
        self._sock = sock
        self._buffers = buffers
        self._low_water = 1
        self._taken_ahead = TLS_RECORD_BYTES if tls is not None else 0

    def receive(self, size: int) -> np.ndarray:
        """The next `size` bytes; OSError (a timeout included) when they do not come."""
        buffer = self._buffers.lease(size)
        view = memoryview(buffer)  # type: ignore[arg-type]
        while view:
            self._wake_at(max(min(len(view), WAKE_BYTES) - self._taken_ahead, 1))
            received = self._sock.recv_into(view)
            if received == 0:
                raise ConnectionError(f"the decoder closed the bulk socket {len(view)} bytes before the end "
                                      "of a batch")
            view = view[received:]
        return buffer

    def _wake_at(self, size: int) -> None:
        """Be woken only once `size` bytes are there (SO_RCVLOWAT): a few large reads, not one per
        packet the sender's pace delivers. Never more than what is still due, which may be all; with
        TLS, less by a record: the TLS layer may hold part of one it read, and the socket would then
        never hold `size` bytes, only the rest of the batch (the receive would wait out its timeout)."""
        if size != self._low_water:
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, size)
            self._low_water = size

    def close(self) -> None:
        try:
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes a receive blocked on it
        except OSError:
            pass
        self._sock.close()


def connect(address: str, offer: BulkOffer, tls: TLS | None, timeout_s: float,
            buffers: ReceiveBuffers) -> BulkSocket | None:
    """The bulk socket a decoder offered, receiving into `buffers`, or None (logged) when it cannot
    be connected."""
    try:
        return BulkSocket(host_of(address), offer, tls, timeout_s, buffers)
    except OSError as exc:  # ssl.SSLError included
        log.warning("cannot connect the bulk socket of decoder %s (port %d: %s); its batches come on the "
                    "gRPC stream instead", address, offer.port, exc)
        return None


__all__ = ["BulkSocket", "connect"]
