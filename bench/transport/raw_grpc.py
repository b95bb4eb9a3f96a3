"""Raw gRPC streaming: a minimal server-streaming RPC of bytes messages, no protobuf, no copy.

Server: ``python -m bench.transport.raw_grpc --port-file FILE``. The request
is ``b"COUNT,SIZE"``; the server answers with COUNT messages of SIZE bytes
(one preallocated payload sent again and again). The consumer receives each
message as ``bytes`` and views it as a uint8 array without copying: the upper
bound of what any gRPC data plane can deliver on this machine.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from collections.abc import Iterable, Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import numpy as np

from bench.meter import Batch, LoaderFactory
from bench.spec import ConsumerSpec

METHOD = "/bench.RawStream/Stream"
MAX_MESSAGE = 1 << 30
OPTIONS = [("grpc.max_send_message_length", MAX_MESSAGE),
           ("grpc.max_receive_message_length", MAX_MESSAGE)]


def _stream(request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
    count, size = (int(v) for v in request.split(b","))
    payload = bytes(np.random.default_rng(0).integers(0, 256, size=size, dtype=np.uint8))
    for _ in range(count):
        if not context.is_active():
            return
        yield payload


def serve(port_file: Path) -> int:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), options=OPTIONS)
    handler = grpc.method_handlers_generic_handler(
        "bench.RawStream", {"Stream": grpc.unary_stream_rpc_method_handler(_stream)})
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    port_file.write_text(f"127.0.0.1:{port}\n")
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    server.stop(grace=1.0).wait()
    return 0


def loader_factory(spec: ConsumerSpec) -> LoaderFactory:
    rows = max(1, spec.message_bytes // spec.row_bytes)

    @contextlib.contextmanager
    def open_loader() -> Iterator[Iterable[Batch]]:
        channel = grpc.insecure_channel(spec.address, options=OPTIONS)
        stream = channel.unary_stream(METHOD)
        grpc.channel_ready_future(channel).result(timeout=30)

        def batches() -> Iterator[Batch]:
            call: Any = stream(f"{spec.message_count},{spec.message_bytes}".encode())
            try:
                for message in call:
                    yield {"x": np.frombuffer(message, dtype=np.uint8).reshape(rows, -1)}
            finally:
                call.cancel()

        try:
            yield batches()
        finally:
            channel.close()

    return open_loader


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench.transport.raw_grpc", description=__doc__)
    parser.add_argument("--port-file", required=True)
    return serve(Path(parser.parse_args(argv).port_file))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
