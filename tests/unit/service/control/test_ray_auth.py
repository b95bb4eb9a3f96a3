"""Which RAY_AUTH_MODE `serve` joins a cluster with: the one set, else the cluster's answer.

A stand-in for the head's GCS (a real gRPC server on port 0) answers the probe as a GCS with
token authentication on or off does: UNAUTHENTICATED, or a reply.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from shardstream.service.control.ray_auth import (
    PROBE_METHOD,
    RayJoinError,
    auth_token_source,
    choose_auth_mode,
    cluster_wants_token,
)


def _gcs(wants_token: bool) -> grpc.GenericRpcHandler:
    service, method = PROBE_METHOD.strip("/").split("/")

    def answer(request: bytes, context: grpc.ServicerContext) -> bytes:
        if wants_token:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "InvalidAuthToken: Authentication token is missing")
        return b"\n\x10cluster-id-bytes"

    return grpc.method_handlers_generic_handler(service, {method: grpc.unary_unary_rpc_method_handler(answer)})


@pytest.fixture(params=[True, False], ids=["token-auth", "no-auth"])
def gcs(request: pytest.FixtureRequest) -> Iterator[tuple[str, bool]]:
    server = grpc.server(futures.ThreadPoolExecutor(2))
    server.add_generic_rpc_handlers((_gcs(request.param),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}", request.param
    server.stop(0)


@pytest.fixture
def token(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "token").write_text("abc")
    return {"RAY_AUTH_TOKEN_PATH": str(tmp_path / "token")}


def test_the_cluster_says_whether_it_wants_a_token(gcs: tuple[str, bool], token: dict[str, str]) -> None:
    address, wants = gcs
    assert cluster_wants_token(address) is wants
    assert choose_auth_mode(address, token) == ("token" if wants else "disabled")  # a stale token: not used


def test_no_token_for_a_cluster_that_wants_one_is_one_line_naming_what_to_set(gcs: tuple[str, bool],
                                                                               tmp_path: Path) -> None:
    address, wants = gcs
    env = {"RAY_AUTH_TOKEN_PATH": str(tmp_path / "missing")}
    if not wants:
        assert choose_auth_mode(address, env) == "disabled"
        return
    with pytest.raises(RayJoinError, match=r"uses token authentication and this process has no token: copy the "
                       r"head's ~/\.ray/auth_token"):
        choose_auth_mode(address, env)


def test_a_mode_that_is_set_is_kept(gcs: tuple[str, bool]) -> None:
    assert choose_auth_mode(gcs[0], {"RAY_AUTH_MODE": "disabled"}) == "disabled"


def test_an_unreachable_head_is_named() -> None:
    with pytest.raises(RayJoinError, match=r"cannot reach the Ray cluster's GCS at 127\.0\.0\.1:1 "):
        cluster_wants_token("127.0.0.1:1", timeout_s=2)


def test_where_the_token_comes_from(tmp_path: Path, token: dict[str, str]) -> None:
    assert auth_token_source({"RAY_AUTH_TOKEN": "x"}) == "RAY_AUTH_TOKEN"
    assert auth_token_source(token) == token["RAY_AUTH_TOKEN_PATH"]
    assert auth_token_source({"RAY_AUTH_TOKEN_PATH": str(tmp_path / "missing")}) is None
