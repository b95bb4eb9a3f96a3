"""Run a real S3 API server (moto's server mode) for tests, on 127.0.0.1 and a free port.

While :func:`running_s3_server` is active, s3fs filesystems in this process and
in child processes started meanwhile (which inherit ``os.environ``; a test's
Ray job forwards it to the decode actors) talk to it:

``AWS_ENDPOINT_URL``
    botocore (under s3fs's aiobotocore) sends every request to this endpoint.
``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` / ``AWS_DEFAULT_REGION``
    dummy credentials and a region, so nothing probes for real ones.

fsspec's in-process s3fs instance cache is cleared on enter and exit, and the
environment is restored on exit.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass

import fsspec
from moto.server import ThreadedMotoServer

_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


@dataclass(frozen=True)
class S3Server:
    endpoint: str

    def filesystem(self) -> fsspec.AbstractFileSystem:
        return fsspec.filesystem("s3", endpoint_url=self.endpoint, skip_instance_cache=True)


@contextlib.contextmanager
def running_s3_server() -> Iterator[S3Server]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    saved = {key: os.environ.get(key) for key in (*_ENV, "AWS_ENDPOINT_URL")}
    os.environ.update(_ENV, AWS_ENDPOINT_URL=endpoint)
    fsspec.get_filesystem_class("s3").clear_instance_cache()
    try:
        yield S3Server(endpoint)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        fsspec.get_filesystem_class("s3").clear_instance_cache()
        server.stop()
