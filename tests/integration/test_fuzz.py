"""Bad input over the wire while a real job runs: every request ends in a gRPC status with a
message, never INTERNAL or a hang, and the running job's batches stay exactly-once. The requests
go to the service's port and to a decode actor's batch server (the direct data plane's port).
On a service with a tokens file, malformed and unknown `authorization` metadata, on either port,
is refused with UNAUTHENTICATED and only that, and the service goes on serving a valid token."""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import psutil
import pytest
import ray
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from shardstream.client import RemoteLoader
from shardstream.proto import FETCH_BATCHES_METHOD, PROTOCOL_VERSION, SERVICE_NAME
from shardstream.proto.errors import ERROR_METADATA_KEY
from shardstream.proto.v1 import loader_pb2 as pb
from shardstream.service.config import ServiceConfig
from shardstream.service.control.server import Service, create_server
from shardstream.service.identities import HOW_TO_SEND
from tests.datasets import oracle_batches, write_indexed
from tests.identities import TOKENS, bearer, entry, write_tokens_file

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
    # No cloud URLs: without a reachable store their clients retry for minutes
    # (test_object_stores covers gs:// and s3:// against real API servers).
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
versions = st.sampled_from([0, PROTOCOL_VERSION - 1, PROTOCOL_VERSION, 99])
job_ids = st.sampled_from(["", "nope", "TARGET"]) | st.text(max_size=20)
requests = st.one_of(
    st.tuples(st.just("OpenJob"), st.binary(max_size=64)),
    st.tuples(st.just("GetStatus"), st.binary(max_size=16)),
    st.tuples(st.sampled_from(["ListDecoders", "GetManifest"]), st.binary(max_size=32)),
    st.tuples(st.just("ListDecoders"), st.builds(pb.ListDecodersRequest, protocol_version=versions, job_id=job_ids)),
    st.tuples(st.just("GetManifest"), st.builds(pb.GetManifestRequest, protocol_version=versions, job_id=job_ids)),
    st.tuples(st.just("OpenJob"), st.builds(pb.OpenJobRequest, protocol_version=st.sampled_from([0, 1, 2, 3]),
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
        if getattr(body, "job_id", None) == "TARGET":  # ListDecoders, GetManifest of the running job
            body.job_id = Target.job_id
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


# ---------------------------------------------------------------- authorization metadata

KNOWN = TOKENS["team-a"]
# What the grpc client sends at all: header values are printable ASCII (it refuses others, and tabs,
# itself, before anything is sent); anything else travels in `-bin` keys, as bytes.
PRINTABLE = st.characters(min_codepoint=0x20, max_codepoint=0x7E)
values = st.one_of(
    st.just(""), st.text(PRINTABLE, max_size=48),
    st.builds(lambda scheme, rest: scheme + rest,
              st.sampled_from(["Bearer ", "bearer ", "BEARER  ", " Bearer ", "Bearer", "Basic ", "Token ", "Bearer:"]),
              st.text(PRINTABLE, max_size=40) | st.sampled_from([KNOWN, KNOWN + "x", KNOWN[:-1], f"{KNOWN} {KNOWN}",
                                                                 f" {KNOWN} ", KNOWN.upper()])),
    st.sampled_from([KNOWN, f"Bearer {KNOWN}", f"Basic {KNOWN}"]),
)
entries = st.one_of(
    st.tuples(st.just("authorization"), values),
    st.tuples(st.sampled_from(["authorization-bin", "x-token-bin"]), st.binary(max_size=48)),  # any bytes
    st.tuples(st.from_regex(r"x-[a-z0-9-]{1,10}", fullmatch=True), st.text(PRINTABLE, max_size=24)),
    st.tuples(st.just("authorization-bin"), st.just(f"Bearer {KNOWN}".encode())),
)
metadata_lists = st.one_of(
    st.lists(entries, max_size=6),
    # huge: a value up to 7,000 bytes (gRPC's own limit, 8 KiB of metadata, refuses larger ones itself)
    st.builds(lambda n, c: [("authorization", "Bearer " + c * n)], st.integers(1000, 7000), st.sampled_from("Az9-")),
    st.builds(lambda value, n: [("authorization", value)] * n, values, st.integers(2, 40)),  # duplicates
)


def admitted(metadata: list[tuple[str, Any]]) -> bool:
    """The oracle: one `authorization` entry, 'Bearer' (any case), whitespace, the known token (exact
    case: tokens are compared byte for byte)."""
    found = [value for key, value in metadata if key == "authorization"]
    return len(found) == 1 and re.fullmatch(rf"\s*(?i:bearer)\s+{re.escape(KNOWN)}\s*", found[0]) is not None


class AuthTarget:
    job_id = ""
    calls: dict[str, int] = {}  # noqa: RUF012


def expect(metadata: list[tuple[str, Any]], code: grpc.StatusCode, details: str | None,
           trailing: Any) -> None:
    outcome = "admitted" if admitted(metadata) else "refused"
    AuthTarget.calls[outcome] = AuthTarget.calls.get(outcome, 0) + 1
    if outcome == "admitted":
        assert code is grpc.StatusCode.OK, f"{code}: {details} for {metadata!r}"
        return
    assert code is grpc.StatusCode.UNAUTHENTICATED, f"{code}: {details} for {metadata!r}"
    assert details and " refused: " in details, details
    assert dict(trailing or ()).get(ERROR_METADATA_KEY) == "Unauthenticated"
    # A value counts as echoed when it is in the message beyond the fixed how-to text (a generated
    # value may happen to be a piece of that text, e.g. "Bearer <token>").
    said = details.replace(f"this service wants a token: {HOW_TO_SEND}", "")
    shown = [value for _, value in metadata if isinstance(value, str) and len(value.strip()) >= 8]
    assert KNOWN not in details and not any(value.strip() in said for value in shown), details  # never echoed


@pytest.fixture(scope="module")
def auth_service(local_ray: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, str, str]]:
    base = tmp_path_factory.mktemp("fuzz-auth")
    write_indexed(f"{base}/data", [9, 6])
    write_tokens_file(base / "tokens.json", {"team-a": entry(KNOWN)})
    running, port = create_server(ServiceConfig(port=0, num_decoders=1, decoder_cpus=0.25,
                                                auth_tokens_file=str(base / "tokens.json")))
    yield running, f"127.0.0.1:{port}", f"{base}/data"
    running.stop(grace=1.0)


def test_malformed_authorization_metadata_is_unauthenticated(auth_service: tuple[Service, str, str]) -> None:
    running, address, data = auth_service
    loader = RemoteLoader(address, dataset=data, batch_size=3, seed=1, world_size=1, rank=0, token=KNOWN,
                          job_name="fuzz-auth")
    AuthTarget.job_id = loader.job.job_id
    opened = [pb.FetchControl(open=pb.FetchOpen(protocol_version=PROTOCOL_VERSION, job_id=AuthTarget.job_id)),
              pb.FetchControl(want=pb.Want(step=0))]
    with grpc.insecure_channel(address) as channel, \
            grpc.insecure_channel(running.pool.batch_addresses()[0]) as decoder:
        status = channel.unary_unary(f"/{SERVICE_NAME}/GetStatus", request_serializer=identity,
                                     response_deserializer=identity)
        fetch = decoder.stream_stream(FETCH_BATCHES_METHOD, request_serializer=pb.FetchControl.SerializeToString,
                                      response_deserializer=identity)

        @settings(max_examples=300, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(metadata=metadata_lists, port=st.sampled_from(["service", "decoder"]))
        @example(metadata=[("authorization", f"Bearer {KNOWN}")], port="service")  # admitted, on both ports
        @example(metadata=[("x-a", "1"), ("authorization", f"  bearer   {KNOWN} ")], port="decoder")
        @example(metadata=[("authorization", f"Bearer {KNOWN.upper()}")], port="service")  # tokens keep case
        def fuzz(metadata: list[tuple[str, Any]], port: str) -> None:
            try:
                if port == "service":
                    status(b"", metadata=metadata, timeout=CALL_DEADLINE_S)
                else:
                    call = fetch(iter(opened), metadata=metadata, timeout=CALL_DEADLINE_S)
                    next(iter(call))  # one batch: it streams
                    call.cancel()
                expect(metadata, grpc.StatusCode.OK, None, None)
            except grpc.RpcError as exc:
                expect(metadata, exc.code(), exc.details(), exc.trailing_metadata())

        fuzz()
        # Past gRPC's own metadata limit the transport refuses the call before any of the service's
        # code runs, with RESOURCE_EXHAUSTED; the service is not disturbed.
        with pytest.raises(grpc.RpcError) as oversized:
            status(b"", metadata=bearer("x" * 65536), timeout=CALL_DEADLINE_S)
        assert oversized.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    refused = AuthTarget.calls.get("refused", 0)
    assert refused >= 200 and AuthTarget.calls.get("admitted", 0) >= 1, AuthTarget.calls
    with loader:  # a valid token is served as before
        assert [b["idx"].tolist() for b in loader] == oracle_batches(15, 1, 0, 3, True, 1, False, 0)
    # Each refusal counted once, on whichever port refused it (a decoder's come with its reports).
    assert running.gate is not None
    deadline = time.monotonic() + 20
    while sum(running.gate.refusals.totals().values()) < refused and time.monotonic() < deadline:
        time.sleep(0.2)
    totals = running.gate.refusals.totals()
    assert sum(totals.values()) == refused, totals
    assert {who for who, _ in totals} == {"unknown"}
    assert {why for _, why in totals} <= {"no_token", "malformed", "unknown_token"}


# ---------------------------------------------------------------- every numeric field at its extremes

INT32 = [0, -1, 1, 2**31 - 1, -(2**31)]
INT64 = [*INT32, 2**63 - 1, -(2**63)]
UINT32 = [0, 1, 2**32 - 1]
FLOATS = [0.0, -1.0, 1e308, float("inf"), float("-inf"), float("nan")]
RSS_GROWTH_BOUND = 200 * 2**20
log = logging.getLogger(__name__)


def edges(*values: int) -> st.SearchStrategy[int]:
    """A field's extremes and its limit's neighbours."""
    return st.sampled_from(sorted({v + d for v in values for d in (-1, 0, 1)}))


LIMITS = ServiceConfig().request_limits
INT64S, INT32S = st.sampled_from(INT64), st.sampled_from(INT32)
json_ints = st.sampled_from([*INT64, 2**64, LIMITS.seq_len + 1, LIMITS.image_side + 1])
# Each field a request may push to its extremes, and what to push it to; the rest of the request
# stays valid, so each extreme reaches as deep as it can.
SPEC_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "batch_size": INT64S | edges(LIMITS.batch_size), "seed": INT64S,
    "world_size": INT32S | edges(LIMITS.world_size), "on_corrupt": st.sampled_from([*INT32, 2]),
    "shuffle_block": INT64S | edges(LIMITS.shuffle_block), "pad_value": st.sampled_from(FLOATS),
    "bucket_window": INT64S | edges(LIMITS.bucket_window), "size": json_ints | edges(LIMITS.image_side),
    "seq_len": json_ints | edges(LIMITS.seq_len),
}
OPEN_FIELDS: dict[str, st.SearchStrategy[Any]] = {"protocol_version": st.sampled_from(UINT32), "rank": INT32S}
FETCH_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "open.protocol_version": st.sampled_from(UINT32), "open.epoch": INT64S | edges(LIMITS.epoch),
    "open.rank": INT32S | edges(LIMITS.world_size), "want.step": INT64S, "want.max_bytes": INT64S,
    "want.data_stall": st.sampled_from(FLOATS),
}
FIELDS = [*SPEC_FIELDS, *OPEN_FIELDS, *FETCH_FIELDS]


def numeric_request(data: str, pushed: dict[str, Any], mode: str) -> pb.OpenJobRequest:
    """A valid OpenJob of `data` in order `mode`, with the `pushed` fields set to their values."""
    spec = pb.JobSpec(dataset=[data], batch_size=3, world_size=2, shuffle=True, seed=5,
                      shuffle_block=4 if mode == "block" else 0, weights="y" if mode == "weights" else "",
                      bucket_by="idx" if mode == "bucket" else "", bucket_window=2 if mode == "bucket" else 0)
    request = pb.OpenJobRequest(protocol_version=PROTOCOL_VERSION, rank=1, spec=spec)
    spec = request.spec  # the request's own copy
    for name, value in pushed.items():
        if name == "size":
            spec.transform.name, spec.transform.args_json = "image", json.dumps({"size": value})
        elif name == "seq_len":
            spec.format, spec.format_args_json = "tokens", json.dumps({"seq_len": value})
        elif name in SPEC_FIELDS:
            if name == "bucket_window" and not spec.bucket_by:
                spec.bucket_by = "idx"
            setattr(spec, name, value)
        elif name in OPEN_FIELDS:
            setattr(request, name, value)
    return request


def numeric_fetch(pushed: dict[str, Any]) -> tuple[pb.FetchOpen, pb.Want]:
    opened, want = pb.FetchOpen(protocol_version=PROTOCOL_VERSION, epoch=1, rank=1), pb.Want(step=0)
    for name, value in pushed.items():
        if name.startswith(("open.", "want.")):
            kind, field_name = name.split(".")
            setattr(opened if kind == "open" else want, field_name, value)
    return opened, want


TYPED_CODES = ALLOWED - {grpc.StatusCode.OK, grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.CANCELLED}


def typed(code: grpc.StatusCode, details: str | None, trailing: Any) -> None:
    """A status the service chose: one of ALLOWED, with a message and, for its own, the class."""
    record(code, details)
    if code in TYPED_CODES:
        assert dict(trailing or ()).get(ERROR_METADATA_KEY), f"{code}: {details} carries no error class"


def rss(pids: list[int]) -> list[int]:
    return [psutil.Process(pid).memory_info().rss for pid in pids]


def reset_peaks(pids: list[int]) -> None:
    """Start each process's peak resident size (VmHWM) afresh: what is freed again still counts."""
    for pid in pids:
        with open(f"/proc/{pid}/clear_refs", "w") as clear:
            clear.write("5")


def peaks(pids: list[int]) -> list[int]:
    """Each process's peak resident size since reset_peaks, bytes."""
    found = []
    for pid in pids:
        with open(f"/proc/{pid}/status") as status:
            found += [int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:")]
    return found


def test_every_numeric_field_at_its_extremes_is_refused_or_bounded(service: tuple[Service, str],
                                                                   tmp_path: object) -> None:
    """Every numeric field of OpenJob and of FetchBatches at 0, -1, 2**31-1, 2**63-1, ... and at the
    service's limits +-1: each request ends in a typed status, and the service's and the decode
    actors' memory stays bounded, at its peak (a world size of 2**27 once grew a decoder by 1.1 GiB)."""
    running, service_address = service
    data = f"{tmp_path}/numeric"
    write_indexed(data, [40, 23])
    pids = [os.getpid(), *(ray.get(actor.pid.remote(), timeout=30) for _, actor in running.pool.ready_actors())]
    decoders = running.pool.batch_addresses()
    Target.codes.clear()
    Target.requests = 0
    with grpc.insecure_channel(service_address) as channel:
        open_job = channel.unary_unary(f"/{SERVICE_NAME}/OpenJob", request_serializer=pb.OpenJobRequest.SerializeToString,
                                       response_deserializer=pb.OpenJobResponse.FromString)
        valid = open_job(pb.OpenJobRequest(protocol_version=PROTOCOL_VERSION, job_name="numeric-valid", rank=0,
                                           spec=pb.JobSpec(dataset=[data], batch_size=3, world_size=2, shuffle=True)),
                         timeout=CALL_DEADLINE_S)
        examples = iter(range(10**6))
        fetch_channels = [grpc.insecure_channel(address) for address in decoders]

        def fetch(job_id: str, opened: pb.FetchOpen, wants: list[pb.Want], decoder: grpc.Channel) -> None:
            opened.job_id = job_id
            messages = [pb.FetchControl(open=opened), *(pb.FetchControl(want=w) for w in wants)]
            call = decoder.stream_stream(FETCH_BATCHES_METHOD, request_serializer=pb.FetchControl.SerializeToString,
                                         response_deserializer=identity)(iter(messages), timeout=CALL_DEADLINE_S)
            try:
                for _ in call:
                    pass
                record(grpc.StatusCode.OK, None)
            except grpc.RpcError as exc:
                typed(exc.code(), exc.details(), exc.trailing_metadata())

        for decoder in fetch_channels:  # warm: each decoder has planned and decoded once
            fetch(valid.job_id, pb.FetchOpen(protocol_version=PROTOCOL_VERSION, epoch=0, rank=0),
                  [pb.Want(step=0)], decoder)
        before = rss(pids)
        reset_peaks(pids)
        started = time.monotonic()

        @settings(max_examples=400, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(names=st.lists(st.sampled_from(FIELDS), min_size=1, max_size=2, unique=True), draw=st.data(),
               mode=st.sampled_from(["exact", "block", "weights", "bucket"]), at_new_job=st.booleans(),
               which=st.integers(0, len(decoders) - 1))
        def fuzz(names: list[str], draw: st.DataObject, mode: str, at_new_job: bool, which: int) -> None:
            pushed = {name: draw.draw(({**SPEC_FIELDS, **OPEN_FIELDS, **FETCH_FIELDS})[name], label=name)
                      for name in names}
            request = numeric_request(data, pushed, mode)
            request.job_name = f"numeric-{next(examples)}"
            opened, want = numeric_fetch(pushed)
            job_id = valid.job_id
            try:
                response = open_job(request, timeout=CALL_DEADLINE_S)
                record(grpc.StatusCode.OK, None)
                if at_new_job:
                    job_id = response.job_id
                    opened.rank = pushed.get("open.rank", request.rank)  # the rank it opened as
            except grpc.RpcError as exc:
                typed(exc.code(), exc.details(), exc.trailing_metadata())
            fetch(job_id, opened, [want], fetch_channels[which])

        served = numeric_request(data, {"world_size": LIMITS.world_size, "rank": LIMITS.world_size - 1}, "bucket")
        served.job_name = "numeric-widest"  # the largest world the service takes, served at its last rank
        widest = open_job(served, timeout=CALL_DEADLINE_S)
        fetch(widest.job_id, pb.FetchOpen(protocol_version=PROTOCOL_VERSION, epoch=LIMITS.epoch,
                                          rank=LIMITS.world_size - 1), [pb.Want(step=0)], fetch_channels[0])
        try:
            fuzz()
        finally:
            for decoder in fetch_channels:
                decoder.close()
        elapsed = time.monotonic() - started
        status = channel.unary_unary(f"/{SERVICE_NAME}/GetStatus", request_serializer=identity,
                                     response_deserializer=pb.ServiceStatus.FromString)(b"", timeout=CALL_DEADLINE_S)
        after, peak = rss(pids), peaks(pids)
    growth = max(p - b for p, b in zip(peak, before, strict=True))
    log.warning("numeric fuzz: %d requests in %.1f s, outcomes %s, %d jobs open; RSS (MiB) of the service and "
                "its %d decode actors %s, at their peak %s, after %s (largest growth %+.1f MiB)", Target.requests,
                elapsed, Target.codes, len(status.jobs), len(pids) - 1, [m >> 20 for m in before],
                [m >> 20 for m in peak], [m >> 20 for m in after], growth / 2**20)
    assert status.jobs  # GetStatus still answers, with every position it reports in range
    assert {"OK", "INVALID_ARGUMENT"} <= set(Target.codes), Target.codes
    assert growth < RSS_GROWTH_BOUND, f"a process's RSS peaked {growth / 2**20:.0f} MiB above its start"


@pytest.mark.parametrize(("spec", "needle"), [
    (pb.JobSpec(dataset=["http://127.0.0.1:9/x.parquet"], batch_size=1, world_size=1),
     "does not read datasets over http://; it reads file://, gs://, s3://"),
    (pb.JobSpec(dataset=["https://example.invalid/d/"], batch_size=1, world_size=1), "over https://"),
    (pb.JobSpec(dataset=["/d"], batch_size=1, world_size=1,
                transform=pb.TransformSpec(name="image", args_json="[" * 5000 + "]" * 5000)),
     "transform_args's nesting, 5000 levels deep, is above this service's limit of 32"),
    (pb.JobSpec(dataset=["/d"], batch_size=1, world_size=1, format_args_json='{"a":' * 900 + "1" + "}" * 900),
     "format_args's nesting, 900 levels deep"),
    (pb.JobSpec(dataset=["/d"], batch_size=1, world_size=2**27), "world_size 134,217,728 is above"),
])
def test_user_input_that_once_was_internal_is_invalid_argument(service: tuple[Service, str], spec: pb.JobSpec,
                                                               needle: str) -> None:
    with grpc.insecure_channel(service[1]) as channel:
        open_job = channel.unary_unary(f"/{SERVICE_NAME}/OpenJob", request_serializer=pb.OpenJobRequest.SerializeToString,
                                       response_deserializer=pb.OpenJobResponse.FromString)
        with pytest.raises(grpc.RpcError) as refused:
            open_job(pb.OpenJobRequest(protocol_version=PROTOCOL_VERSION, spec=spec), timeout=CALL_DEADLINE_S)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, refused.value.details()
    assert needle in (refused.value.details() or ""), refused.value.details()
    assert dict(refused.value.trailing_metadata() or ()).get(ERROR_METADATA_KEY) == "InvalidJobSpec"
