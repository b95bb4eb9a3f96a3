"""Raw TCP on loopback: sendall of a preallocated buffer into recv_into of a reused buffer.

Server: ``python -m bench.transport.raw_tcp --port-file FILE``. A client sends
a 16-byte header (COUNT, SIZE as two little-endian uint64) and receives COUNT
messages of SIZE bytes, back to back. No framing, no copy beyond the kernel's:
the floor of what moving these bytes between two processes costs.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import socket
import struct
import sys
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

from bench.meter import Batch, LoaderFactory
from bench.spec import ConsumerSpec

HEADER = struct.Struct("<QQ")


def _recv_exact(sock: socket.socket, view: memoryview) -> None:
    while view:
        received = sock.recv_into(view)
        if received == 0:
            raise ConnectionError("the raw TCP server closed the connection early")
        view = view[received:]


def _handle(conn: socket.socket) -> None:
    with conn:
        header = bytearray(HEADER.size)
        _recv_exact(conn, memoryview(header))
        count, size = HEADER.unpack(header)
        payload = memoryview(np.random.default_rng(0).integers(0, 256, size=size, dtype=np.uint8))
        try:
            for _ in range(count):
                conn.sendall(payload)
        except (BrokenPipeError, ConnectionResetError):
            return


def serve(port_file: Path) -> int:
    listener = socket.create_server(("127.0.0.1", 0))
    port_file.write_text(f"127.0.0.1:{listener.getsockname()[1]}\n")
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: (stop.set(), listener.close()))
    while not stop.is_set():
        try:
            conn, _ = listener.accept()
        except OSError:
            break
        threading.Thread(target=_handle, args=(conn,), daemon=True).start()
    return 0


def loader_factory(spec: ConsumerSpec) -> LoaderFactory:
    rows = max(1, spec.message_bytes // spec.row_bytes)

    @contextlib.contextmanager
    def open_loader() -> Iterator[Iterable[Batch]]:
        host, port = spec.address.rsplit(":", 1)
        sock = socket.create_connection((host, int(port)), timeout=60)

        def batches() -> Iterator[Batch]:
            buffer = np.empty(spec.message_bytes, dtype=np.uint8)
            view = memoryview(buffer)
            sock.sendall(HEADER.pack(spec.message_count, spec.message_bytes))
            for _ in range(spec.message_count):
                _recv_exact(sock, view)
                yield {"x": buffer.reshape(rows, -1)}

        try:
            yield batches()
        finally:
            sock.close()

    return open_loader


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench.transport.raw_tcp", description=__doc__)
    parser.add_argument("--port-file", required=True)
    return serve(Path(parser.parse_args(argv).port_file))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
