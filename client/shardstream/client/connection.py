"""The client's link to the service: one gRPC channel, typed errors, and reconnecting.

Control calls, one job each: OpenJob opens or joins the job, ListDecoders
lists the decoders a rank fetches from (and its window), GetManifest reads the
job's reproducibility manifest. Joining is OpenJob, then ListDecoders.

Reconnecting is safe because every request is idempotent: OpenJob with the
same name and spec joins the same job (whose plan is a pure function of the
spec, the dataset and the epoch), ListDecoders and GetManifest only read, and
a batch stream is keyed by (job, epoch, rank, start step). After a connection
reset or a service restart, the client joins the job again and resumes the
stream at its next batch.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import grpc

from shardstream.client.auth import Token, call_metadata
from shardstream.client.job_view import JobView
from shardstream.client.shutdown import track_channel, untrack_channel
from shardstream.client.tls import TLS, explain_handshake_failure, open_channel
from shardstream.proto import PROTOCOL_VERSION
from shardstream.proto.errors import (
    ServiceUnavailable,
    ShardstreamError,
    from_rpc_error,
)
from shardstream.proto.v1 import loader_pb2 as pb
from shardstream.proto.v1 import loader_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 1 << 30
# Asked once when the channel does not become ready, for gRPC's last connection error: any method
# does (this one needs no message); a service that answers at all, even UNIMPLEMENTED, is reachable.
PROBE_METHOD = "/grpc.health.v1.Health/Check"
PROBE_TIMEOUT_S = 2.0
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    # Come back quickly after a restart instead of gRPC's default backoff of up to 2 minutes.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2000),
    # Despite its name, gRPC core takes this as the least time a connection attempt gets to finish
    # (TCP, TLS, the server's HTTP/2 SETTINGS). At 100 ms a loaded host or a long link failed the
    # first attempt, and a stream opened then (a decoder's, without wait_for_ready) failed with it.
    ("grpc.min_reconnect_backoff_ms", 5_000),
    # A connection a network black-holes fails by a ping unanswered: one goes out after 30 s
    # without one, and the connection is dropped 10 s later without its answer (keepalive_timeout_ms
    # alone does not do it: the ping's own deadline is ping_timeout_ms, 60 s by default).
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.http2.ping_timeout_ms", 10_000),
    # A fixed 1 MiB HTTP/2 window per stream instead of BDP probing, which grew it until gRPC
    # buffered batches beyond the rank's window in the training process (its RSS peak halved).
    # 1 MiB still covers 10 GB/s at a 100 us round trip.
    ("grpc.http2.bdp_probe", 0),
    ("grpc.http2.lookahead_bytes", 1 << 20),
]


class ServiceConnection:
    def __init__(self, address: str, connect_timeout: float, tls: TLS | None = None,
                 token: Token | None = None) -> None:
        self.address = address
        self.tls = tls
        self.token = token  # sent with every call (auth.py)
        self._channel = open_channel(address, tls, CHANNEL_OPTIONS)
        track_channel(self)
        self._stub = pb_grpc.LoaderStub(self._channel)
        try:
            self.wait_ready(connect_timeout)
        except ServiceUnavailable:
            self.close()
            raise

    def wait_ready(self, timeout_s: float) -> None:
        try:
            grpc.channel_ready_future(self._channel).result(timeout=timeout_s)
            return
        except grpc.FutureTimeoutError:
            pass
        detail = self._connect_error()
        if detail is None:
            return  # it answered just now
        why = explain_handshake_failure(self.tls, detail) if self.tls is not None else None
        if why is not None:
            raise ServiceUnavailable(f"cannot connect to the shardstream service at {self.address} over TLS: {why} "
                                     f"(gRPC: {detail})")
        hint = ("over TLS: does the service speak TLS, does the CA file (tls.ca_file) sign its "
                "certificate, and does it want a client certificate?" if self.tls is not None
                else "in plaintext: if the service speaks TLS, pass tls=TLS(...)")
        raise ServiceUnavailable(f"cannot reach the shardstream service at {self.address} within {timeout_s:.0f} s "
                                 f"{hint}" + (f" (gRPC: {detail})" if detail else ""))

    def _connect_error(self) -> str | None:
        """gRPC's last error connecting to the service ("" when it has none to say); None when the
        service answers a call now."""
        probe = self._channel.unary_unary(PROBE_METHOD)  # no serializers: bytes in, bytes out
        try:
            probe(b"", timeout=PROBE_TIMEOUT_S)
        except grpc.RpcError as exc:
            code = exc.code()  # type: ignore[attr-defined]
            if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                details: str = exc.details() or ""  # type: ignore[attr-defined]
                return details if code == grpc.StatusCode.UNAVAILABLE else ""
        return None

    def open_job(self, request: pb.OpenJobRequest, timeout_s: float) -> pb.OpenJobResponse:
        response: pb.OpenJobResponse = self._call(self._stub.OpenJob, request, timeout_s)
        return response

    def list_decoders(self, job_id: str, timeout_s: float) -> pb.ListDecodersResponse:
        request = pb.ListDecodersRequest(protocol_version=PROTOCOL_VERSION, job_id=job_id)
        response: pb.ListDecodersResponse = self._call(self._stub.ListDecoders, request, timeout_s)
        return response

    def get_manifest(self, job_id: str, timeout_s: float) -> pb.GetManifestResponse:
        request = pb.GetManifestRequest(protocol_version=PROTOCOL_VERSION, job_id=job_id)
        response: pb.GetManifestResponse = self._call(self._stub.GetManifest, request, timeout_s)
        return response

    def join(self, request: pb.OpenJobRequest, timeout_s: float) -> JobView:
        """Open or join the job, then list its decoders, both within `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        opened = self.open_job(request, timeout_s)
        return JobView.of(opened, self.list_decoders(opened.job_id, max(deadline - time.monotonic(), 0.01)))

    def _call(self, method: Any, request: Any, timeout_s: float) -> Any:
        try:
            return method(request, timeout=timeout_s, metadata=call_metadata(self.token))
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from None

    def reopen_job(self, request: pb.OpenJobRequest, known: JobView, cause: BaseException,
                   timeout_s: float) -> JobView:
        """Reconnect and join the same job again, retrying with backoff until timeout_s."""
        deadline = time.monotonic() + timeout_s
        delay = 0.1
        log.warning("lost the stream from %s (%s); reconnecting", self.address, cause)
        while True:
            try:
                self.wait_ready(max(min(deadline - time.monotonic(), 5.0), 0.01))
                job = self.join(request, max(deadline - time.monotonic(), 0.01))
                known.check_same(job)
                log.info("reconnected to %s, job %s", self.address, job.job_id)
                return job
            except ServiceUnavailable as exc:
                if time.monotonic() + delay > deadline:
                    raise ServiceUnavailable(
                        f"lost the shardstream service at {self.address} ({cause}) and could not "
                        f"reconnect within {timeout_s:.0f} s: {exc}") from None
                time.sleep(delay)
                delay = min(delay * 2, 2.0)

    def close(self) -> None:
        untrack_channel(self)
        self._channel.close()


class NoProgress:
    """Bounds reopening a job that makes no progress: the service answers, but every decoder
    ListDecoders lists fails (unreachable data ports, a certificate that does not match). After
    `timeout_s` without a batch, the last failure is raised; between attempts it backs off."""

    def __init__(self, timeout_s: float) -> None:
        self._timeout_s = timeout_s
        self._step = -1
        self._since = 0.0
        self._delay = 0.1

    def check(self, step: int, exc: ShardstreamError) -> None:
        now = time.monotonic()
        if step != self._step:  # progress since the last failure
            self._step, self._since, self._delay = step, now, 0.1
            return
        if now - self._since > self._timeout_s:
            raise ServiceUnavailable(f"no batch for {self._timeout_s:.0f} s while reopening the job: {exc}") from exc
        time.sleep(self._delay)
        self._delay = min(self._delay * 2, 2.0)


__all__ = ["CHANNEL_OPTIONS", "NoProgress", "ServiceConnection"]
