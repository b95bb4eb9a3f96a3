"""A decode actor's bulk port: batch bytes to ranks on other hosts over a plain socket, not gRPC.

grpcio copies a message into its own buffers to send it, and the rank's
grpcio copies it twice more to hand it to Python; at 9.6 MB batches that is
most of what a rank spends receiving (docs/data-plane.md has the figures).
A socket needs none of it: the decoder sends the frame it collated the batch
into (``sock_sendall``, from the frame itself), and the rank receives it
into a buffer its tensors then view (``recv_into``).

Control stays on the FetchBatches stream: wants, errors, deadlines and
keepalive. A stream opened with ``bulk`` gets an offer first (this port and a
token); the rank connects, sends the token, and from then on asks for its
batches ``bulk``. Each such batch is announced on the stream by a small
message carrying its size, and its bytes follow on the socket in the same
order. With TLS on the service's ports the socket speaks TLS with the same
certificate (and client certificates, when required); the files are read
again for each connection, so a renewed certificate is served without a
restart.

A connection joins only the stream whose token it sends within
HANDSHAKE_TIMEOUT_S; any other is closed.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import socket
import ssl
from collections.abc import Sequence

from shardstream.proto.errors import DeadlineExceeded
from shardstream.proto.wire import BulkOffer
from shardstream.service.tls import TlsFiles, server_ssl_context

log = logging.getLogger(__name__)

TOKEN_BYTES = 16
HANDSHAKE_TIMEOUT_S = 10.0  # for a connection to say which stream it is for (TLS included)
ATTACH_TIMEOUT_S = 10.0  # for the rank's connection to arrive once it asks for bulk batches


class BulkConnection:
    """One stream's socket: frames go out whole and in order."""

    async def send(self, data: bytes) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class _PlainConnection(BulkConnection):
    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    async def send(self, data: bytes) -> None:
        await asyncio.get_running_loop().sock_sendall(self._sock, data)  # no copy of `data`

    def close(self) -> None:
        self._sock.close()


class _TlsConnection(BulkConnection):
    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer

    async def send(self, data: bytes) -> None:
        self._writer.write(data)
        await self._writer.drain()

    def close(self) -> None:
        self._writer.close()


class BulkListener:
    """Binds the first free port of `ports` on `host`; runs on the batch server's event loop."""

    def __init__(self, host: str, ports: Sequence[int], tls: TlsFiles | None) -> None:
        self._tls = tls
        self._context: ssl.SSLContext | None = server_ssl_context(tls) if tls is not None else None
        self._pending: dict[bytes, asyncio.Future[BulkConnection]] = {}
        self._socket = _bind(host, ports)
        self.port = self._socket.getsockname()[1]
        self._accepting: asyncio.Task[None] | None = None
        self._joining: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        """Accept connections (called on the event loop)."""
        self._accepting = asyncio.get_running_loop().create_task(self._accept())

    def offer(self) -> BulkOffer:
        """A new token for a stream; `attached` waits for its connection."""
        token = secrets.token_bytes(TOKEN_BYTES)
        self._pending[token] = asyncio.get_running_loop().create_future()
        return BulkOffer(self.port, token)

    async def attached(self, token: bytes) -> BulkConnection:
        future = self._pending.get(token)
        if future is None:
            raise DeadlineExceeded("the stream's bulk socket is closed")
        try:
            return await asyncio.wait_for(asyncio.shield(future), ATTACH_TIMEOUT_S)
        except asyncio.TimeoutError:
            raise DeadlineExceeded(f"the rank asked for batches on its bulk socket, but none connected to "
                                   f"port {self.port} within {ATTACH_TIMEOUT_S:.0f} s") from None

    def withdraw(self, token: bytes) -> None:
        """The stream is over: forget its token and close its socket."""
        future = self._pending.pop(token, None)
        if future is None:
            return
        if future.done() and not future.cancelled():
            future.result().close()
        else:
            future.cancel()

    def close(self) -> None:
        if self._accepting is not None:
            self._accepting.cancel()
        for joining in list(self._joining):
            joining.cancel()
        for token in list(self._pending):
            self.withdraw(token)
        self._socket.close()

    async def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, _ = await loop.sock_accept(self._socket)
            except OSError as exc:
                log.warning("bulk port %d: accept failed (%s)", self.port, exc)
                await asyncio.sleep(0.1)
                continue
            joining = loop.create_task(self._join(conn))
            self._joining.add(joining)  # held: the loop keeps only weak references to tasks
            joining.add_done_callback(self._joining.discard)

    async def _join(self, conn: socket.socket) -> None:
        """Read the token the connection opens with and hand the connection to that stream."""
        conn.setblocking(False)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            connection, token = await asyncio.wait_for(self._handshake(conn), HANDSHAKE_TIMEOUT_S)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError) as exc:  # ssl.SSLError: OSError
            log.debug("bulk port %d: a connection closed before naming its stream (%r)", self.port, exc)
            conn.close()
            return
        future = self._pending.get(token)
        if future is None or future.done():
            log.warning("bulk port %d: a connection sent a token no open stream offered; closed", self.port)
            connection.close()
            return
        future.set_result(connection)

    async def _handshake(self, conn: socket.socket) -> tuple[BulkConnection, bytes]:
        if self._tls is None:
            return _PlainConnection(conn), await _receive_exactly(conn, TOKEN_BYTES)
        reader, writer = await self._start_tls(conn)
        try:
            return _TlsConnection(writer), await reader.readexactly(TOKEN_BYTES)
        except BaseException:
            writer.close()
            raise

    async def _start_tls(self, conn: socket.socket) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        assert self._tls is not None
        self._context = server_ssl_context(self._tls, self._context)
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        protocol = asyncio.StreamReaderProtocol(reader)
        transport, _ = await loop.connect_accepted_socket(lambda: protocol, conn, ssl=self._context)
        return reader, asyncio.StreamWriter(transport, protocol, reader, loop)


async def _receive_exactly(conn: socket.socket, size: int) -> bytes:
    loop = asyncio.get_running_loop()
    data = bytearray()
    while len(data) < size:
        chunk = await loop.sock_recv(conn, size - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return bytes(data)


def _bind(host: str, ports: Sequence[int]) -> socket.socket:
    """A listening socket on the first free port of `ports`; OSError (the last port's) when none is."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    last = OSError("no port to bind")
    for port in ports:
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.bind((host, port))
            sock.listen(128)
        except OSError as exc:
            sock.close()
            last = exc
            continue
        sock.setblocking(False)
        return sock
    raise last


__all__ = ["ATTACH_TIMEOUT_S", "TOKEN_BYTES", "BulkConnection", "BulkListener"]
