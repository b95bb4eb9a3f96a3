"""Tokens and identities on a real service (auth_tokens_file): every port wants a known token, an
identity reads only its datasets with its transform modules and priority classes, streams only its
own jobs and sees only those in GetStatus; refusals name the identity, never a token, and are
counted in /metrics; a rotated tokens file is picked up without a restart, and the service goes on
serving valid identities throughout."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from shardstream.client import (
    TLS,
    DatasetNotAllowed,
    PermissionDenied,
    RemoteLoader,
    TransformNotAllowed,
    Unauthenticated,
)
from shardstream.proto import FETCH_BATCHES_METHOD, PROTOCOL_VERSION
from shardstream.proto.errors import ERROR_METADATA_KEY
from shardstream.proto.v1 import loader_pb2 as pb
from shardstream.proto.v1 import loader_pb2_grpc as pb_grpc
from shardstream.service.config import ServiceConfig
from shardstream.service.control.server import Service, create_server
from tests.certs import make_pki
from tests.datasets import oracle_batches, write_indexed
from tests.identities import TOKENS, bearer, entry, write_tokens_file

A, B, OPS = TOKENS["team-a"], TOKENS["team-b"], TOKENS["ops"]
WRONG = "not-a-token-of-this-service"
N_A, N_B = 12, 9  # samples in each team's dataset


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("identities")
    write_indexed(f"{root}/team-a/train", [7, 5])
    write_indexed(f"{root}/team-b/train", [4, 5])
    return root


def identities(base: Path, team_a: dict[str, object] | None = None) -> dict[str, dict[str, object]]:
    """The module's tokens file: team-a and team-b each confined to its own prefix, team-a to one
    transform module and the default class; ops an admin that may read nothing (an empty list)."""
    return {
        "team-a": team_a or entry(A, dataset_prefixes=[f"{base}/team-a"], transform_modules=["examples.formats"],
                                  priority_classes=["default"]),
        "team-b": entry(B, hashed=False, dataset_prefixes=[f"{base}/team-b"]),
        "ops": entry(OPS, dataset_prefixes=[], admin=True),
    }


@pytest.fixture(scope="module")
def tokens_file(base: Path) -> Path:
    path = base / "tokens.json"
    write_tokens_file(path, identities(base))
    return path


@pytest.fixture(scope="module")
def service(local_ray: None, tokens_file: Path) -> Iterator[tuple[Service, str]]:
    running, port = create_server(ServiceConfig(
        port=0, num_decoders=1, decoder_cpus=0.25, metrics_port=0, auth_tokens_file=str(tokens_file),
        allowed_transform_modules=("tests.transforms", "examples.formats"), priority_classes=("default=1", "high=4")))
    yield running, f"127.0.0.1:{port}"
    running.stop(grace=1.0)


def _loader(address: str, base: Path, team: str = "team-a", **kwargs: object) -> RemoteLoader:
    options: dict[str, object] = {"batch_size": 4, "seed": 3, "world_size": 1, "rank": 0, "connect_timeout": 10,
                                  **kwargs}
    return RemoteLoader(address, dataset=f"{base}/{team}/train", **options)  # type: ignore[arg-type]


def _epoch(address: str, base: Path, team: str = "team-a", **kwargs: object) -> list[list[int]]:
    with _loader(address, base, team, **kwargs) as loader:
        return [b["idx"].tolist() for b in loader]


def _expected(team: str = "team-a") -> list[list[int]]:
    return oracle_batches(N_A if team == "team-a" else N_B, 1, 0, 4, True, 3, False, 0)


def _fetch(decoder: str, job_id: str, metadata: tuple[tuple[str, str], ...] | None) -> grpc.StatusCode:
    """One FetchBatches stream straight to a decoder: open the job's epoch 0 for rank 0, want step
    0; OK when the batch comes."""
    messages = [pb.FetchControl(open=pb.FetchOpen(protocol_version=PROTOCOL_VERSION, job_id=job_id, rank=0)),
                pb.FetchControl(want=pb.Want(step=0))]
    with grpc.insecure_channel(decoder) as channel:
        call = channel.stream_stream(FETCH_BATCHES_METHOD, request_serializer=pb.FetchControl.SerializeToString,
                                     response_deserializer=bytes)(iter(messages), metadata=metadata, timeout=20)
        try:
            next(iter(call))
            call.cancel()
            return grpc.StatusCode.OK
        except grpc.RpcError as exc:
            _Last.details, _Last.trailing = exc.details() or "", dict(exc.trailing_metadata() or ())
            return exc.code()  # type: ignore[no-any-return]


class _Last:
    """What the last refused _fetch said."""

    details = ""
    trailing: dict[str, str] = {}  # noqa: RUF012


def _status(address: str, token: str | None) -> pb.ServiceStatus:
    with grpc.insecure_channel(address) as channel:
        status: pb.ServiceStatus = pb_grpc.LoaderStub(channel).GetStatus(
            pb.GetStatusRequest(), timeout=10, metadata=bearer(token) if token else None)
        return status


def _within(check: Callable[[], bool], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout_s:.0f} s"
        time.sleep(0.2)


def _accepted(address: str, token: str) -> bool:
    try:
        _status(address, token)
        return True
    except grpc.RpcError as exc:
        assert exc.code() == grpc.StatusCode.UNAUTHENTICATED, exc
        return False


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def refusals(service: tuple[Service, str], identity: str, reason: str) -> float:
    key = ("shardstream_auth_refusals_total", (("identity", identity), ("reason", reason)))
    return scrape(service[0].metrics_port or 0).get(key, 0.0)


def test_a_call_without_a_known_token_is_unauthenticated(service: tuple[Service, str], base: Path) -> None:
    _, address = service
    for token, why in ((None, "this service wants a token: send 'authorization: Bearer <token>'"),
                       (WRONG, "its token is not one this service knows")):
        with pytest.raises(Unauthenticated, match=f"OpenJob refused: {why}") as refused:
            _loader(address, base, token=token)
        assert refused.value.from_service and refused.value.code == grpc.StatusCode.UNAUTHENTICATED
        assert WRONG not in str(refused.value)
        with pytest.raises(grpc.RpcError) as raw:
            _status(address, token)
        assert raw.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with grpc.insecure_channel(address) as channel:  # kubelet's probes carry no token
        health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
    assert health.status == health_pb2.HealthCheckResponse.SERVING
    assert _epoch(address, base, token=A) == _expected()


def test_fetch_batches_straight_to_a_decoder_wants_the_jobs_own_identity(service: tuple[Service, str],
                                                                          base: Path) -> None:
    running, address = service
    with _loader(address, base, token=A, job_name="a-direct") as loader:
        job_id = loader.job.job_id
        decoder = running.pool.batch_addresses()[0]
        for metadata, reason in ((None, "wants a token"), (bearer(WRONG), "not one this service knows"),
                                 ((("authorization", A),), "not 'Bearer <token>'")):
            assert _fetch(decoder, job_id, metadata) == grpc.StatusCode.UNAUTHENTICATED
            assert "FetchBatches refused: " in _Last.details and reason in _Last.details
            assert _Last.trailing[ERROR_METADATA_KEY] == "Unauthenticated" and A not in _Last.details
        assert _fetch(decoder, job_id, bearer(B)) == grpc.StatusCode.PERMISSION_DENIED
        assert _Last.details == (f"identity 'team-b' may not fetch batches of job {job_id!r}: another identity "
                                 "opened it")
        assert _Last.trailing[ERROR_METADATA_KEY] == "PermissionDenied"
        assert _fetch(decoder, job_id, bearer(A)) == grpc.StatusCode.OK
        assert [b["idx"].tolist() for b in loader] == _expected()


def test_listing_the_decoders_or_reading_the_manifest_of_another_identitys_job_is_refused(
        service: tuple[Service, str], base: Path) -> None:
    """As the decoders refuse its batches: PermissionDenied naming the identity, counted; the job's
    own identity and an admin (who sees every job in GetStatus) are answered."""
    _, address = service
    with _loader(address, base, token=A, job_name="a-listed") as loader, grpc.insecure_channel(address) as channel:
        job_id = loader.job.job_id
        stub = pb_grpc.LoaderStub(channel)
        calls = {"list the decoders of": (stub.ListDecoders, pb.ListDecodersRequest(
                     protocol_version=PROTOCOL_VERSION, job_id=job_id)),
                 "read the manifest of": (stub.GetManifest, pb.GetManifestRequest(
                     protocol_version=PROTOCOL_VERSION, job_id=job_id))}
        for what, (call, request) in calls.items():
            before = refusals(service, "team-b", "job")
            with pytest.raises(grpc.RpcError) as refused:
                call(request, timeout=10, metadata=bearer(B))
            assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert refused.value.details() == f"identity 'team-b' may not {what} job {job_id!r}: another identity opened it"
            assert dict(refused.value.trailing_metadata() or ())[ERROR_METADATA_KEY] == "PermissionDenied"
            assert refusals(service, "team-b", "job") == before + 1
            call(request, timeout=10, metadata=bearer(OPS))
        listed = stub.ListDecoders(calls["list the decoders of"][1], timeout=10, metadata=bearer(A))
        assert sorted(listed.batch_servers) == sorted(loader.job.batch_servers)
        assert [b["idx"].tolist() for b in loader] == _expected()


def test_an_identity_reads_only_under_its_dataset_prefixes(service: tuple[Service, str], base: Path) -> None:
    _, address = service
    with pytest.raises(DatasetNotAllowed) as refused:
        _loader(address, base, "team-b", token=A)
    assert str(refused.value) == (f"identity 'team-a' may not read '{base}/team-b/train': its dataset prefixes "
                                  f"are file://{os.path.realpath(base)}/team-a")
    assert refused.value.code == grpc.StatusCode.PERMISSION_DENIED and refused.value.from_service
    with pytest.raises(DatasetNotAllowed, match=r"identity 'team-a' may not read .*; URLs with '\.' or '\.\.' components are not accepted"):
        _loader(address, base, "team-a/train/../../team-b", token=A)
    with pytest.raises(DatasetNotAllowed, match=r"identity 'ops' may not read .*: its dataset prefixes are none"):
        _loader(address, base, token=OPS)
    assert _epoch(address, base, "team-b", token=B) == _expected("team-b")


def test_an_identity_uses_only_its_transform_modules_and_priority_classes(service: tuple[Service, str],
                                                                          base: Path) -> None:
    _, address = service
    with pytest.raises(TransformNotAllowed) as refused:
        _loader(address, base, token=A, transform="tests.transforms:scaled")
    assert str(refused.value) == ("identity 'team-a' may not use transform module 'tests.transforms': its "
                                  "transform modules are examples.formats")
    with pytest.raises(TransformNotAllowed, match=r"identity 'team-a' may not use collate module 'tests\.transforms'"):
        _loader(address, base, token=A, collate="tests.transforms:sum_collate")
    with pytest.raises(PermissionDenied) as denied:
        _loader(address, base, token=A, priority="high")
    assert str(denied.value) == "identity 'team-a' may not use priority class 'high': its priority classes are default"
    # team-b's entry names no modules or classes: the service's own apply.
    with _loader(address, base, "team-b", token=B, transform="tests.transforms:scaled",
                 priority="high") as loader:
        assert len(list(loader)) == len(_expected("team-b"))


def test_jobs_are_each_identitys_own_and_status_shows_only_them(service: tuple[Service, str], base: Path,
                                                                tmp_path: Path) -> None:
    _, address = service
    with _loader(address, base, token=A, job_name="same-name") as a_loader, \
            _loader(address, base, "team-b", token=B, job_name="same-name") as b_loader:
        assert a_loader.job.job_id != b_loader.job.job_id  # the same name under another identity
        assert [b["idx"].tolist() for b in b_loader] == _expected("team-b")
        assert [b["idx"].tolist() for b in a_loader] == _expected()
        ids = {"team-a": a_loader.job.job_id, "team-b": b_loader.job.job_id}
        for token, team in ((A, "team-a"), (B, "team-b")):
            jobs = _status(address, token).jobs
            assert jobs and {job.owner for job in jobs} == {team}
            assert ids[team] in {job.job_id for job in jobs}
        every = _status(address, OPS).jobs  # an admin's
        assert {job.owner for job in every} == {"team-a", "team-b"}
        assert set(ids.values()) <= {job.job_id for job in every}
        token_file = tmp_path / "token"
        token_file.write_text(B + "\n")
        cli = os.path.join(os.path.dirname(sys.executable), "shardstream")
        shown = subprocess.run([cli, "status", address, "--token-file", str(token_file)], capture_output=True,
                               text=True, timeout=60)
        assert shown.returncode == 0, shown.stderr
        assert ids["team-b"] in shown.stdout and "(identity team-b)" in shown.stdout
        assert ids["team-a"] not in shown.stdout
        refused = subprocess.run([cli, "status", address], capture_output=True, text=True, timeout=60,
                                 env={k: v for k, v in os.environ.items() if not k.startswith("SHARDSTREAM_TOKEN")})
        assert refused.returncode == 1 and "GetStatus refused: this service wants a token" in refused.stderr


def test_refusals_are_counted_by_identity_and_reason(service: tuple[Service, str], base: Path) -> None:
    running, address = service
    counted = [("unknown", "no_token"), ("unknown", "unknown_token"), ("team-a", "dataset"), ("team-b", "job")]
    before = {key: refusals(service, *key) for key in counted}
    for token in (None, WRONG):
        with pytest.raises(Unauthenticated):
            _loader(address, base, token=token)
    with pytest.raises(DatasetNotAllowed):
        _loader(address, base, "team-b", token=A)
    with _loader(address, base, token=A, job_name="counted") as loader:  # refused by the decoder
        assert _fetch(running.pool.batch_addresses()[0], loader.job.job_id, bearer(B)) == grpc.StatusCode.PERMISSION_DENIED
    # The decoder's refusals come with its report, within a second or two.
    _within(lambda: all(refusals(service, *key) >= before[key] + 1 for key in counted))
    assert _epoch(address, base, token=A) == _expected()


def test_a_rotated_tokens_file_is_picked_up_without_a_restart(service: tuple[Service, str], base: Path,
                                                             tokens_file: Path, tmp_path: Path) -> None:
    """As a Secret is rotated: the new token is added, clients move to it, the old one is removed.
    One loader runs through it all, reading its token file at each call."""
    running, address = service
    new = "team-a-rotated-token-42"
    client_token = tmp_path / "token"
    client_token.write_text(A)
    grants = identities(base)["team-a"]
    try:
        with _loader(address, base, token_file=str(client_token), job_name="rotating") as loader:
            assert [b["idx"].tolist() for b in loader] == _expected()
            write_tokens_file(tokens_file, identities(base, {**grants, "tokens": [new]}))  # both, for now
            _within(lambda: _accepted(address, new))
            client_token.write_text(new)
            loader.set_epoch(0)
            assert [b["idx"].tolist() for b in loader] == _expected()
            write_tokens_file(tokens_file, identities(base, {"tokens": [new], **{
                k: v for k, v in grants.items() if k != "tokens_sha256"}}))  # the old one is gone
            _within(lambda: not _accepted(address, A))
            assert _fetch(running.pool.batch_addresses()[0], loader.job.job_id, bearer(A)) == \
                grpc.StatusCode.UNAUTHENTICATED  # the decoders had the table before the service's port
            loader.set_epoch(0)
            assert [b["idx"].tolist() for b in loader] == _expected()
            tokens_file.write_text('{"identities": {"team-a": {"tok')  # caught half-written: ignored
            assert running.gate is not None
            _within(lambda: running.gate is not None and running.gate.file.rejected is not None)  # read and refused
            assert _accepted(address, new) and not _accepted(address, A)
    finally:
        write_tokens_file(tokens_file, identities(base))
        _within(lambda: _accepted(address, A))
    assert _epoch(address, base, token=A) == _expected()


def test_tokens_from_the_environment(service: tuple[Service, str], base: Path, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    _, address = service
    monkeypatch.setenv("SHARDSTREAM_TOKEN", B)
    assert _epoch(address, base, "team-b") == _expected("team-b")
    monkeypatch.delenv("SHARDSTREAM_TOKEN")
    (tmp_path / "token").write_text(f"{A}\n")
    monkeypatch.setenv("SHARDSTREAM_TOKEN_FILE", str(tmp_path / "token"))
    assert _epoch(address, base) == _expected()


def test_tokens_over_tls(local_ray: None, base: Path, tokens_file: Path, tmp_path: Path) -> None:
    """With TLS the same metadata travels encrypted, to the service and to the decoders."""
    pki = make_pki(tmp_path / "pki")
    running, port = create_server(ServiceConfig(port=0, num_decoders=1, decoder_cpus=0.25,
                                                tls_cert_file=pki.server_cert, tls_key_file=pki.server_key,
                                                auth_tokens_file=str(tokens_file)))
    address = f"127.0.0.1:{port}"
    try:
        assert _epoch(address, base, token=A, tls=TLS(ca_file=pki.ca)) == _expected()
        with pytest.raises(Unauthenticated):
            _loader(address, base, tls=TLS(ca_file=pki.ca))
    finally:
        running.stop(grace=1.0)
