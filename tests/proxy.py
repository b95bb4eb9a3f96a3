"""A TCP proxy on 127.0.0.1 that a test can use to cut every open connection (a network reset), or to
stop passing bytes while keeping connections open (a black-holed network)."""

from __future__ import annotations

import socket
import threading
import time


class ResettingProxy:
    def __init__(self, target_host: str, target_port: int, connect_delay_s: float = 0.0) -> None:
        self._target = (target_host, target_port)
        self._connect_delay_s = connect_delay_s  # a slow link or a loaded host: the server answers late
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._connections: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False
        self._frozen = threading.Event()
        self.resets = 0
        self.accepted = 0  # connections made through it
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            time.sleep(self._connect_delay_s)
            upstream = socket.create_connection(self._target)
            with self._lock:
                self._connections += [client, upstream]
                self.accepted += 1
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def freeze(self) -> None:
        """From now on, swallow every byte in both directions; connections stay open."""
        self._frozen.set()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(1 << 16):
                if not self._frozen.is_set():
                    sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def reset_all(self) -> None:
        """RST every open connection (SO_LINGER 0), as a failing network would."""
        with self._lock:
            connections, self._connections = self._connections, []
        for conn in connections:
            try:
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                # Wake the pipe thread blocked in recv() first: while it is, close() alone releases
                # nothing, and the RST waits for the next byte to arrive (a keepalive, 30 s later).
                conn.shutdown(socket.SHUT_RD)
                conn.close()
            except OSError:
                pass
        self.resets += 1

    def close(self) -> None:
        self._closed = True
        try:
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes accept(); close() alone does not
        except OSError:
            pass
        self._listener.close()
        self.reset_all()
