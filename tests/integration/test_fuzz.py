"""Bad input over the wire while a real job runs: every request ends in a gRPC status with a
message, never INTERNAL or a hang, and the running job's batches stay exactly-once. The requests
go to the service's port and to a decode actor's batch server (the direct data plane's port)."""

from __future__ import annotations

import threading
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardstream.client import RemoteLoader
from shardstream.proto import FETCH_BATCHES_METHOD, PROTOCOL_VERSION, SERVICE_NAME
from shardstream.proto.v1 import loader_pb2 as pb
from shardstream.service.control.server import Service
from tests.datasets import oracle_batches, write_indexed

CALL_DEADLINE_S = 20
ALLOWED = {
    grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.DATA_LOSS,
    grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.CANCELLED,
}
identity = lambda b: b  # noqa: E731


class Target:
    """The running job the fuzzer aims at, and what it has seen."""

    job_id = ""
    dataset = ""
    codes: dict[str, int] = {}  # noqa: RUF012
    requests = 0


def record(code: grpc.StatusCode, details: str | None) -> None:
    assert code in ALLOWED, f"{code}: {details}"
    if code is not grpc.StatusCode.OK:
        assert details, f"{code} without a message"
    Target.codes[code.name] = Target.codes.get(code.name, 0) + 1
    Target.requests += 1


def unary(channel: grpc.Channel, method: str, payload: bytes) -> None:
    call = channel.unary_unary(f"/{SERVICE_NAME}/{method}", request_serializer=identity,
                               response_deserializer=identity)
    try:
        call(payload, timeout=CALL_DEADLINE_S)
        record(grpc.StatusCode.OK, None)
    except grpc.RpcError as exc:
        record(exc.code(), exc.details())


def stream(channel: grpc.Channel, messages: list[bytes], method: str) -> None:
    call = channel.stream_stream(method, request_serializer=identity,
                                 response_deserializer=identity)(iter(messages), timeout=CALL_DEADLINE_S)
    try:
        for _ in call:  # a valid request streams: one batch is enough
            call.cancel()
            break
        record(grpc.StatusCode.OK, None)
    except grpc.RpcError as exc:
        record(exc.code(), exc.details())


specs = st.builds(
    pb.JobSpec,
    # No cloud URLs: without a reachable store their clients retry for minutes (test_gcs and
    # test_s3 cover gs:// and s3:// against real API servers).
    dataset=st.lists(st.sampled_from(["", "/nope", "memory://nope/", "nosuchfs://x/y", "*",
                                      "file:///etc/passwd"]) |
                     st.text(max_size=20), max_size=3),
    batch_size=st.integers(-5, 10**12), shuffle=st.booleans(), seed=st.integers(-(2**63), 2**63 - 1),
    drop_last=st.booleans(), world_size=st.integers(-3, 2**31 - 1),
    transform=st.builds(pb.TransformSpec, name=st.sampled_from(["", "image", "os:system", "x"]) | st.text(max_size=10),
                        args_json=st.sampled_from(["", "{}", "[", "{\"size\": -1}", "null"]) | st.text(max_size=10)),
    columns=st.lists(st.text(max_size=5), max_size=3),
    on_corrupt=st.sampled_from([0, 1, 7]),
)
fetch_opens = st.builds(pb.FetchOpen, protocol_version=st.sampled_from([0, PROTOCOL_VERSION, 99]),
                        job_id=st.sampled_from(["", "nope"]) | st.just("TARGET"), epoch=st.integers(-2, 5),
                        rank=st.integers(-2, 4))
requests = st.one_of(
    st.tuples(st.just("OpenJob"), st.binary(max_size=64)),
    st.tuples(st.just("GetStatus"), st.binary(max_size=16)),
    st.tuples(st.just("OpenJob"), st.builds(pb.OpenJobRequest, protocol_version=st.sampled_from([0, 1, 2]),
                                            job_name=st.text(max_size=8), spec=specs, rank=st.integers(-2, 10))),
    st.tuples(st.just("Fetch"), st.lists(st.binary(max_size=32), min_size=0, max_size=3)),
    st.tuples(st.just("Fetch"), st.lists(
        st.one_of(st.builds(pb.FetchControl, open=fetch_opens),
                  st.builds(pb.FetchControl, want=st.builds(pb.Want, step=st.integers(-3, 200),
                                                            max_bytes=st.integers(-1, 1 << 40)))),
        min_size=1, max_size=3)),
)


def send(channel: grpc.Channel, request: tuple[str, Any], decoder: grpc.Channel) -> None:
    method, body = request
    if method == "Fetch":  # a decode actor's batch server
        stream(decoder, _aimed(body), FETCH_BATCHES_METHOD)
    else:
        unary(channel, method, body if isinstance(body, bytes) else body.SerializeToString())


def _aimed(body: list[Any]) -> list[bytes]:
    """A stream's messages as bytes, an 'open' naming TARGET aimed at the running job."""
    messages = []
    for item in body:
        if not isinstance(item, bytes):
            if item.WhichOneof("kind") == "open" and item.open.job_id == "TARGET":
                item.open.job_id = Target.job_id
            item = item.SerializeToString()
        messages.append(item)
    return messages


@pytest.mark.slow
def test_a_thousand_bad_requests_while_a_job_runs(service: tuple[Service, str], tmp_path: object) -> None:
    running, service_address = service
    data = f"{tmp_path}/data"
    write_indexed(data, [150, 50])
    loader = RemoteLoader(service_address, dataset=data, batch_size=2, seed=4, world_size=2, rank=1, prefetch=2,
                          job_name="fuzz-target")
    Target.job_id, Target.dataset = loader.job.job_id, data
    seen: dict[int, list[list[int]]] = {}
    done = threading.Event()

    def run_job() -> None:  # two epochs while the fuzzer runs
        for epoch in (0, 1):
            loader.set_epoch(epoch)
            seen[epoch] = [b["idx"].tolist() for b in loader]
        done.set()

    runner = threading.Thread(target=run_job, daemon=True)
    runner.start()
    with grpc.insecure_channel(service_address) as channel, \
            grpc.insecure_channel(running.pool.batch_addresses()[0]) as decoder:

        @settings(max_examples=1000, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(request=requests)
        def fuzz(request: tuple[str, Any]) -> None:
            send(channel, request, decoder)

        fuzz()
        unary(channel, "OpenJob", b"\x0a" + b"\xff" * 20 * 2**20)  # larger than max_request_bytes
        assert Target.codes.get("RESOURCE_EXHAUSTED")
    assert done.wait(120)
    loader.close()
    assert Target.requests >= 1001
    assert len(Target.codes) >= 3  # the fuzzer reached several distinct outcomes
    for epoch in (0, 1):
        assert seen[epoch] == oracle_batches(200, 2, 1, 2, True, 4, False, epoch)
