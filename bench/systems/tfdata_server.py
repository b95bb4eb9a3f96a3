"""A tf.data service on this machine: one dispatcher and one worker in this process.

    python -m bench.systems.tfdata_server --workload DIR --port-file FILE

Exports the workload to TFRecord if needed, starts the servers, writes the
dispatcher's target (``grpc://localhost:PORT``) to FILE and serves until
SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path

from bench.systems.tfrecords import export_tfrecords

log = logging.getLogger("bench.tfdata_server")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench.systems.tfdata_server", description=__doc__)
    parser.add_argument("--workload", required=True, help="directory of the workload's Parquet shards")
    parser.add_argument("--port-file", required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    export_tfrecords(Path(args.workload))

    import tensorflow as tf

    service = tf.data.experimental.service
    dispatcher = service.DispatchServer(service.DispatcherConfig(port=0))
    dispatcher_address = dispatcher.target.split("://", 1)[1]
    worker = service.WorkerServer(service.WorkerConfig(dispatcher_address=dispatcher_address, port=0))
    log.info("tf.data service: dispatcher %s and one worker", dispatcher.target)
    Path(args.port_file).write_text(dispatcher.target + "\n")

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    worker.stop()
    dispatcher.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
