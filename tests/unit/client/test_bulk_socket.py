"""Bulk sockets: a decoder's listener (service side) and a rank's socket (client side), for real on
loopback: frames arrive whole and in order, a connection joins only the stream whose token it
sends, and TLS and client certificates hold as on the gRPC ports (the receive buffers:
test_receive_buffers.py)."""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import numpy as np
import pytest

from shardstream.client.bulk_socket import BulkSocket
from shardstream.client.receive_buffers import ReceiveBuffers
from shardstream.client.tls import TLS
from shardstream.proto.errors import DeadlineExceeded
from shardstream.proto.wire import BulkOffer
from shardstream.service.node import bulk_listener
from shardstream.service.node.bulk_listener import BulkConnection, BulkListener
from shardstream.service.tls import TlsFiles
from tests.certs import Pki, make_pki

T = TypeVar("T")


class Loop:
    """An event loop on a thread of its own, as the batch server runs one."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, make: Callable[[], Any], timeout: float = 15.0) -> Any:
        async def call() -> Any:
            result = make()
            return await result if asyncio.iscoroutine(result) else result
        return asyncio.run_coroutine_threadsafe(call(), self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


@pytest.fixture
def loop() -> Iterator[Loop]:
    running = Loop()
    yield running
    running.close()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("bulk-pki"))


def _listener(loop: Loop, tls: TlsFiles | None = None) -> BulkListener:
    def start() -> BulkListener:
        listener = BulkListener("127.0.0.1", [0], tls)
        listener.start()
        return listener
    return loop.run(start)


def _frames() -> list[bytes]:
    rng = np.random.default_rng(0)
    return [rng.integers(0, 256, size=size, dtype=np.uint8).tobytes() for size in (5 << 20, 1, 300_000, 0, 64)]


def _send_all(loop: Loop, listener: BulkListener, offer: BulkOffer, frames: list[bytes]) -> None:
    async def send() -> None:
        connection: BulkConnection = await listener.attached(offer.token)
        for frame in frames:
            await connection.send(frame)
    asyncio.run_coroutine_threadsafe(send(), loop.loop)


def test_frames_arrive_whole_and_in_order(loop: Loop) -> None:
    listener = _listener(loop)
    offer = loop.run(listener.offer)
    frames = _frames()
    rank = BulkSocket("127.0.0.1", offer, None, timeout_s=10, buffers=ReceiveBuffers(2))
    _send_all(loop, listener, offer, frames)
    assert [rank.receive(len(f)).tobytes() for f in frames] == frames
    rank.close()
    loop.run(listener.close)


def test_over_tls_with_client_certificates(loop: Loop, pki: Pki) -> None:
    listener = _listener(loop, TlsFiles(pki.server_cert, pki.server_key, pki.ca))
    offer = loop.run(listener.offer)
    frames = _frames()
    trainer = TLS(ca_file=pki.ca, cert_file=pki.client_cert, key_file=pki.client_key, server_name="localhost")
    rank = BulkSocket("127.0.0.1", offer, trainer, timeout_s=10, buffers=ReceiveBuffers(2))
    _send_all(loop, listener, offer, frames)
    assert [rank.receive(len(f)).tobytes() for f in frames] == frames
    rank.close()

    # no client certificate: the handshake fails, and no stream gets the connection
    second = loop.run(listener.offer)
    with pytest.raises(OSError):
        stranger = BulkSocket("127.0.0.1", second, TLS(ca_file=pki.ca, server_name="localhost"), timeout_s=5,
                              buffers=ReceiveBuffers(2))
        stranger.receive(1)  # TLS 1.3 reports a refused client certificate on the first read
    # plaintext to a TLS port: refused too
    with pytest.raises(OSError):
        BulkSocket("127.0.0.1", second, None, timeout_s=5, buffers=ReceiveBuffers(2)).receive(1)
    loop.run(listener.close)


def test_a_connection_with_a_token_no_stream_offered_is_closed(loop: Loop, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bulk_listener, "ATTACH_TIMEOUT_S", 0.5)
    listener = _listener(loop)
    offer = loop.run(listener.offer)
    forged = BulkOffer(offer.port, bytes(16))
    stranger = BulkSocket("127.0.0.1", forged, None, timeout_s=5, buffers=ReceiveBuffers(2))
    with pytest.raises(ConnectionError, match="closed the bulk socket"):
        stranger.receive(10)
    with pytest.raises(DeadlineExceeded, match="none connected"):  # the real stream's rank never came
        loop.run(lambda: listener.attached(offer.token))
    loop.run(listener.close)


def test_a_socket_closed_mid_frame_says_how_much_was_missing(loop: Loop) -> None:
    listener = _listener(loop)
    offer = loop.run(listener.offer)
    rank = BulkSocket("127.0.0.1", offer, None, timeout_s=10, buffers=ReceiveBuffers(2))

    async def half_then_close() -> None:
        connection = await listener.attached(offer.token)
        await connection.send(b"x" * 1000)
        listener.withdraw(offer.token)  # the stream ends: its socket closes

    loop.run(half_then_close)
    with pytest.raises(ConnectionError, match="1000 bytes before the end"):
        rank.receive(2000)
    rank.close()
    loop.run(listener.close)


def test_a_frame_that_does_not_come_times_out(loop: Loop) -> None:
    listener = _listener(loop)
    offer = loop.run(listener.offer)
    rank = BulkSocket("127.0.0.1", offer, None, timeout_s=0.5, buffers=ReceiveBuffers(2))
    with pytest.raises(TimeoutError):
        rank.receive(10)
    rank.close()
    loop.run(listener.close)


class RecordSplitter:
    """A TLS peer on a raw socket (ssl.MemoryBIO) that sends a batch's ciphertext in two parts cut
    inside its first record, so the rank's TLS layer reads part of a record and waits for the rest."""

    def __init__(self, pki: Pki) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(pki.server_cert, pki.server_key)
        self._context = context
        self.conn: socket.socket | None = None
        self._incoming, self._outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self._tls: ssl.SSLObject | None = None
        self.token = b""
        self.accepted = threading.Thread(target=self._accept, daemon=True)
        self.accepted.start()

    def _accept(self) -> None:
        self.conn, _ = self.server.accept()
        tls = self._tls = self._context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        while True:
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                self.conn.sendall(self._outgoing.read())
                self._incoming.write(self.conn.recv(65536))
        self.conn.sendall(self._outgoing.read())
        while len(self.token) < 16:  # the rank's token
            try:
                self.token += tls.read(16 - len(self.token))
            except ssl.SSLWantReadError:
                self._incoming.write(self.conn.recv(65536))
        self.conn.sendall(self._outgoing.read())

    def ciphertext(self, data: bytes) -> bytes:
        assert self._tls is not None
        self._tls.write(data)
        return self._outgoing.read()

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.server.close()


def test_over_tls_a_batch_whose_first_record_came_in_part_arrives(pki: Pki) -> None:
    """The receive asks to be woken once the batch's bytes are on the socket (SO_RCVLOWAT); with
    TLS, part of a record the TLS layer already took off the socket must not count as still due,
    or the socket never holds that much and the receive waits out its timeout."""
    peer = RecordSplitter(pki)
    offer = BulkOffer(port=peer.port, token=bytes(range(16)))
    rank = BulkSocket("127.0.0.1", offer, TLS(ca_file=pki.ca, server_name="localhost"), timeout_s=3,
                      buffers=ReceiveBuffers(2))
    peer.accepted.join(5)
    assert peer.conn is not None and peer.token == offer.token
    batch = np.random.default_rng(1).integers(0, 256, size=30_000, dtype=np.uint8).tobytes()  # under the socket buffer
    sealed = peer.ciphertext(batch)
    peer.conn.sendall(sealed[:8_000])  # inside the first of its two records
    threading.Timer(0.5, peer.conn.sendall, args=(sealed[8_000:],)).start()
    time.sleep(0.2)  # the rank's TLS layer takes the 8 kB, then waits on the socket for the rest
    assert rank.receive(len(batch)).tobytes() == batch
    rank.close()
    peer.close()
