"""Which RAY_AUTH_MODE joins a Ray cluster: asked of the cluster, not guessed.

`ray start` (Ray 2.60) turns token authentication on when it finds a token
(`~/.ray/auth_token`, `RAY_AUTH_TOKEN`, `RAY_AUTH_TOKEN_PATH`), and a process
that joins without `RAY_AUTH_MODE=token` is refused with a bare
ConnectionError after about 20 s. Guessing from a token file on the joining
host is wrong both ways (a head started without one, a stale token left in
~/.ray), and a driver in token mode on a cluster without authentication
connects but cannot start actors. So, unless RAY_AUTH_MODE is set, `serve`
asks the head's GCS one unauthenticated call: UNAUTHENTICATED means the
cluster wants a token, an answer means it does not.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import grpc

PROBE_METHOD = "/ray.rpc.NodeInfoGcsService/GetClusterId"  # any GCS call answers UNAUTHENTICATED without a token
PROBE_TIMEOUT_S = 10.0


class RayJoinError(ConnectionError):
    """`serve` could not join the Ray cluster; the message says what to check or set."""


def auth_token_source(env: Mapping[str, str] = os.environ) -> str | None:
    """Where Ray would read this process's auth token from, or None without one."""
    if env.get("RAY_AUTH_TOKEN"):
        return "RAY_AUTH_TOKEN"
    path = env.get("RAY_AUTH_TOKEN_PATH")
    if path:
        return path if os.path.isfile(path) else None
    default = os.path.join(os.path.expanduser("~"), ".ray", "auth_token")
    return default if os.path.isfile(default) else None


def cluster_wants_token(address: str, timeout_s: float = PROBE_TIMEOUT_S) -> bool | None:
    """Whether the GCS at `address` (HOST:PORT) refuses a call without a token; None when it
    cannot tell (no answer in time, an address like "auto", a Ray without this call)."""
    if ":" not in address or address.startswith(("auto", "ray://")):
        return None
    with grpc.insecure_channel(address) as channel:
        call = channel.unary_unary(PROBE_METHOD, request_serializer=None, response_deserializer=None)
        try:
            call(b"", timeout=timeout_s)
        except grpc.RpcError as exc:
            code = exc.code()  # type: ignore[attr-defined]
            if code == grpc.StatusCode.UNAUTHENTICATED:
                return True
            if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                raise RayJoinError(f"cannot reach the Ray cluster's GCS at {address} ({code.name}: "
                                   f"{exc.details()}): start the head with `ray start --head --port PORT` "  # type: ignore[attr-defined]
                                   "and pass its HOST:PORT") from None
            return None
    return False


def choose_auth_mode(address: str, env: Mapping[str, str] = os.environ) -> str:
    """RAY_AUTH_MODE to join `address` with: the one set, else what the cluster wants; without
    an answer, "token" when a token is at hand (as `ray start` decides), else "disabled"."""
    if env.get("RAY_AUTH_MODE"):
        return env["RAY_AUTH_MODE"]
    wants = cluster_wants_token(address)
    token = auth_token_source(env)
    if wants and token is None:
        raise RayJoinError(f"the Ray cluster at {address} uses token authentication and this process has no "
                           "token: copy the head's ~/.ray/auth_token to ~/.ray/auth_token here, or set "
                           "RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH")
    if wants is None:
        return "token" if token else "disabled"
    return "token" if wants else "disabled"


def join_failure(address: str, mode: str, token: str | None, exc: BaseException) -> str:
    """One line: why joining `address` failed and what to check or set."""
    if mode == "token" and token is None:
        hint = ("RAY_AUTH_MODE=token is set but no token was found: put the head's ~/.ray/auth_token in "
                "~/.ray/auth_token here, or set RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH")
    elif mode == "token":
        hint = f"check that the token in {token} is the head's ~/.ray/auth_token"
    else:
        hint = ("if the cluster uses token authentication, give this process the head's ~/.ray/auth_token "
                "(~/.ray/auth_token, RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH) and RAY_AUTH_MODE=token")
    return f"cannot join the Ray cluster at {address} ({exc}): {hint}"


__all__ = ["PROBE_METHOD", "RayJoinError", "auth_token_source", "choose_auth_mode", "cluster_wants_token",
           "join_failure"]
