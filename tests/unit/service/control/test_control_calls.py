"""The service's control calls, one job each, on a real gRPC port in this process (a stand-in decode
pool, no Ray): OpenJob opens or joins, ListDecoders lists the job's decoders and the rank's window,
GetManifest returns the manifest. Each refuses a client of another protocol version, naming both
versions; with a tokens file, each refuses a caller without a token, and ListDecoders and GetManifest
refuse a job the caller may not see, as the decoders refuse its batches."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import grpc
import pytest

from shardstream.client import RemoteLoader
from shardstream.client.connection import ServiceConnection
from shardstream.proto import PROTOCOL_VERSION, SERVICE_NAME
from shardstream.proto.errors import ERROR_METADATA_KEY, JobNotFound, ProtocolMismatch
from shardstream.proto.v1 import loader_pb2 as pb
from shardstream.proto.v1 import loader_pb2_grpc as pb_grpc
from shardstream.service.config import ServiceConfig
from shardstream.service.control.auth import Gate
from shardstream.service.control.bounded import StorageCalls
from shardstream.service.control.jobs import JobRegistry
from shardstream.service.control.server import _loader_handler
from shardstream.service.control.servicer import LoaderServicer
from shardstream.service.identities import IdentityFile, Refusals
from tests.datasets import write_indexed
from tests.identities import TOKENS, bearer, entry, write_tokens_file

A, B, OPS = TOKENS["team-a"], TOKENS["team-b"], TOKENS["ops"]
DECODERS = ["10.0.0.1:7001", "10.0.0.2:7001", "10.0.0.3:7001"]


class Pool:
    """The decode pool as the control calls use it: jobs registered, ready actors' addresses."""

    def __init__(self) -> None:
        self.registered: list[str] = []
        self.addresses = list(DECODERS)

    def register(self, job: Any) -> None:
        self.registered.append(job.job_id)

    def batch_addresses(self) -> list[str]:
        return list(self.addresses)


class Errors:
    def labels(self, *_: str) -> Errors:
        return self

    def inc(self) -> None:
        pass


@dataclass
class Metrics:
    errors: Errors


@dataclass
class Running:
    address: str
    pool: Pool
    registry: JobRegistry
    refusals: Refusals


def serve(config: ServiceConfig, gate: Gate | None = None) -> Iterator[Running]:
    pool, registry = Pool(), JobRegistry(())
    servicer = LoaderServicer(config, registry, pool, Metrics(Errors()),  # type: ignore[arg-type]
                              StorageCalls(4), gate)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4),
                         interceptors=[gate.interceptor()] if gate is not None else None)
    server.add_generic_rpc_handlers((_loader_handler(servicer),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield Running(f"127.0.0.1:{port}", pool, registry, gate.refusals if gate is not None else Refusals("service"))
    finally:
        server.stop(0).wait()


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> str:
    directory = str(tmp_path_factory.mktemp("control") / "data")
    write_indexed(directory, [7, 5])
    return directory


@pytest.fixture(scope="module")
def plain() -> Iterator[Running]:
    yield from serve(ServiceConfig(port=0, job_max_decoders=2, job_max_in_flight_bytes=1 << 20))


@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory, data: str) -> Iterator[Running]:
    path = tmp_path_factory.mktemp("tokens") / "tokens.json"
    write_tokens_file(path, {"team-a": entry(A), "team-b": entry(B), "ops": entry(OPS, admin=True)})
    yield from serve(ServiceConfig(port=0), Gate(IdentityFile(str(path)), Refusals("service")))


def open_request(data: str, name: str = "job", version: int = PROTOCOL_VERSION) -> pb.OpenJobRequest:
    return pb.OpenJobRequest(protocol_version=version, job_name=name, rank=1,
                             spec=pb.JobSpec(dataset=[data], batch_size=2, world_size=4, shuffle=True))


def call(address: str, method: str, request: Any, response: Any, token: str | None = None) -> Any:
    with grpc.insecure_channel(address) as channel:
        stub = channel.unary_unary(f"/{SERVICE_NAME}/{method}", request_serializer=type(request).SerializeToString,
                                   response_deserializer=response.FromString)
        return stub(request, timeout=10, metadata=bearer(token) if token else None)


def refused(address: str, method: str, request: Any, response: Any, token: str | None = None) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as raised:
        call(address, method, request, response, token)
    return raised.value


def by_id(method: str, job_id: str, version: int = PROTOCOL_VERSION) -> tuple[Any, Any]:
    if method == "ListDecoders":
        return pb.ListDecodersRequest(protocol_version=version, job_id=job_id), pb.ListDecodersResponse
    return pb.GetManifestRequest(protocol_version=version, job_id=job_id), pb.GetManifestResponse


def test_open_job_opens_only_and_the_decoders_and_manifest_are_calls_of_their_own(plain: Running,
                                                                                  data: str) -> None:
    opened = call(plain.address, "OpenJob", open_request(data), pb.OpenJobResponse)
    assert opened.job_id and opened.num_samples == 12 and opened.batches_per_rank == 2
    assert plain.pool.registered[-1] == opened.job_id  # every decoder learns the job before OpenJob answers
    listed = call(plain.address, "ListDecoders", *by_id("ListDecoders", opened.job_id))
    assert len(listed.batch_servers) == 2 and set(listed.batch_servers) <= set(DECODERS)  # job_max_decoders
    assert listed.max_window_bytes == (1 << 20) // 4  # job_max_in_flight_bytes / world_size
    manifest = json.loads(call(plain.address, "GetManifest", *by_id("GetManifest", opened.job_id)).manifest_json)
    assert manifest["dataset"]["samples"] == 12 and manifest["order"]["world_size"] == 4
    plain.pool.addresses.append("10.0.0.4:7001")  # a decoder joins: the next listing may name it
    again = call(plain.address, "ListDecoders", *by_id("ListDecoders", opened.job_id))
    assert len(again.batch_servers) == 2 and set(again.batch_servers) <= {*DECODERS, "10.0.0.4:7001"}


@pytest.mark.parametrize("method", ["OpenJob", "ListDecoders", "GetManifest"])
def test_a_client_of_the_previous_protocol_version_is_refused_naming_both(plain: Running, data: str,
                                                                          method: str) -> None:
    old = PROTOCOL_VERSION - 1
    job_id = call(plain.address, "OpenJob", open_request(data), pb.OpenJobResponse).job_id
    request, response = ((open_request(data, version=old), pb.OpenJobResponse) if method == "OpenJob"
                         else by_id(method, job_id, old))
    error = refused(plain.address, method, request, response)
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert dict(error.trailing_metadata() or ())[ERROR_METADATA_KEY] == "ProtocolMismatch"
    assert (f"client speaks protocol version {old}, this service speaks {PROTOCOL_VERSION}"
            in (error.details() or ""))


def test_the_client_raises_protocol_mismatch_for_the_calls_it_makes(plain: Running, data: str) -> None:
    connection = ServiceConnection(plain.address, 10)
    try:
        with pytest.raises(ProtocolMismatch, match=f"protocol version {PROTOCOL_VERSION - 1}, this service "
                                                   f"speaks {PROTOCOL_VERSION}"):
            connection.open_job(open_request(data, version=PROTOCOL_VERSION - 1), 10)
        job = connection.join(open_request(data), 10)  # OpenJob, then ListDecoders
        assert job.batch_servers and job.max_window_bytes == (1 << 20) // 4
        with pytest.raises(JobNotFound, match="no job 'nope' on this service"):
            connection.list_decoders("nope", 10)
        with pytest.raises(JobNotFound):
            connection.get_manifest("nope", 10)
    finally:
        connection.close()


@pytest.mark.parametrize("method", ["ListDecoders", "GetManifest"])
def test_a_job_id_is_held_to_the_request_limits_and_bytes_that_do_not_parse_are_refused(
        plain: Running, method: str) -> None:
    long = refused(plain.address, method, *by_id(method, "j" * 2000))
    assert long.code() == grpc.StatusCode.INVALID_ARGUMENT and "max_name_chars" in (long.details() or "")
    with grpc.insecure_channel(plain.address) as channel:
        raw = channel.unary_unary(f"/{SERVICE_NAME}/{method}")
        with pytest.raises(grpc.RpcError) as malformed:
            raw(b"\x0a\xff\xff", timeout=10)
    assert malformed.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"malformed {method}Request" in (malformed.value.details() or "")


@pytest.mark.parametrize("method", ["ListDecoders", "GetManifest"])
def test_another_identitys_job_is_refused_as_its_decoders_refuse_it(tokens: Running, data: str,
                                                                     method: str) -> None:
    job_id = call(tokens.address, "OpenJob", open_request(data, "a-job"), pb.OpenJobResponse, A).job_id
    before = tokens.refusals.totals().get(("team-b", "job"), 0)
    error = refused(tokens.address, method, *by_id(method, job_id), B)
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED
    assert dict(error.trailing_metadata() or ())[ERROR_METADATA_KEY] == "PermissionDenied"
    verb = "list the decoders of" if method == "ListDecoders" else "read the manifest of"
    assert error.details() == f"identity 'team-b' may not {verb} job {job_id!r}: another identity opened it"
    assert tokens.refusals.totals()[("team-b", "job")] == before + 1
    call(tokens.address, method, *by_id(method, job_id), A)  # its own
    call(tokens.address, method, *by_id(method, job_id), OPS)  # an admin sees every job, as in GetStatus
    anonymous = refused(tokens.address, method, *by_id(method, job_id))
    assert anonymous.code() == grpc.StatusCode.UNAUTHENTICATED
    assert (anonymous.details() or "").startswith(f"{method} refused: this service wants a token")


def test_the_generated_stub_names_the_new_calls(plain: Running, data: str) -> None:
    with grpc.insecure_channel(plain.address) as channel:
        stub = pb_grpc.LoaderStub(channel)
        job_id = stub.OpenJob(open_request(data), timeout=10).job_id
        assert stub.ListDecoders(pb.ListDecodersRequest(protocol_version=PROTOCOL_VERSION, job_id=job_id),
                                 timeout=10).batch_servers
        assert stub.GetManifest(pb.GetManifestRequest(protocol_version=PROTOCOL_VERSION, job_id=job_id),
                                timeout=10).manifest_json



def spy(connection: ServiceConnection) -> dict[str, int]:
    """How often `connection` makes each control call from now on."""
    calls: dict[str, int] = {}

    def counting(name: str, method: Any) -> Any:
        def call(*args: Any) -> Any:
            calls[name] = calls.get(name, 0) + 1
            return method(*args)

        return call

    for name in ("open_job", "list_decoders", "get_manifest"):
        setattr(connection, name, counting(name, getattr(connection, name)))
    return calls


def test_a_loader_joins_refreshes_and_reads_the_manifest_one_call_each(plain: Running, data: str) -> None:
    """The refresh is ListDecoders alone, replacing loader.job with a new snapshot of the same job; the
    manifest is GetManifest; a job the service forgot is joined again (OpenJob) before either."""
    with RemoteLoader(plain.address, dataset=data, batch_size=2, world_size=4, rank=1, job_name="a-loader",
                      connect_timeout=10) as loader:
        calls = spy(loader._connection)
        joined = loader.job
        assert len(joined.batch_servers) == 2 and loader.window_bytes == (1 << 20) // 4
        assert loader._list_decoders() == list(loader.job.batch_servers) and calls == {"list_decoders": 1}
        assert loader.job is not joined and loader.job == joined  # a new snapshot of the same listing
        assert loader.manifest()["dataset"]["samples"] == 12 and calls["get_manifest"] == 1
        plain.registry.expire(0.0)  # idle past job_idle_ttl_s: the service forgets the job
        assert loader._list_decoders() and calls == {"list_decoders": 3, "open_job": 1, "get_manifest": 1}
        assert loader.job.job_id == joined.job_id
