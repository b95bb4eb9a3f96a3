"""`shardstream status`: the service's status fetched (GetStatus) and printed once, or again every
few seconds in place, or as one JSON object per line for scripts. It needs only the client's
packages, so it runs wherever a training job does."""

from __future__ import annotations

import logging
import sys
import time

import grpc
from google.protobuf.json_format import MessageToJson

from shardstream.client.auth import Token, call_metadata
from shardstream.client.status_text import repainted, status_text
from shardstream.client.tls import TLS, open_channel
from shardstream.proto.errors import ShardstreamError, from_rpc_error
from shardstream.proto.v1 import loader_pb2 as pb
from shardstream.proto.v1 import loader_pb2_grpc as pb_grpc

log = logging.getLogger("shardstream")  # the command's own logger, as its other lines


def show_status(address: str, tls: TLS | None, as_json: bool = False, watch_s: float | None = None,
            iterations: int | None = None, token: Token | None = None) -> int:
    """Print the service's status once, or every `watch_s` seconds (a screen a person reads; with
    --json, one JSON object per line for scripts)."""
    shown = 0
    with open_channel(address, tls) as channel:
        stub = pb_grpc.LoaderStub(channel)
        while True:
            try:
                status = stub.GetStatus(pb.GetStatusRequest(), timeout=10, metadata=call_metadata(token))
            except grpc.RpcError as exc:
                log.error("%s: %s", address, from_rpc_error(exc))
                return 1
            except ShardstreamError as exc:  # an unreadable token file
                log.error("%s: %s", address, exc)
                return 1
            if as_json:
                # every field, zeros too (rank 0, epoch 0), so a script need not know proto3's defaults
                text = MessageToJson(status, preserving_proto_field_name=True, indent=None,
                                     always_print_fields_with_no_presence=True) + "\n"
            else:
                text = status_text(address, status)
                if watch_s is not None and sys.stdout.isatty():
                    text = repainted(time.strftime("%H:%M:%S ") + text, first=shown == 0)
            sys.stdout.write(text)
            sys.stdout.flush()
            shown += 1
            if watch_s is None or (iterations is not None and shown >= iterations):
                return 0
            try:
                time.sleep(watch_s)
            except KeyboardInterrupt:
                return 0


__all__ = ["show_status"]
