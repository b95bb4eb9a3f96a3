"""Tokens on the service's port: who calls (a server interceptor), and what that identity may do.

With `auth_tokens_file` (identities.py), the interceptor admits a call to any
method but the gRPC health service's (kubelet probes it without a token) only
with ``authorization: Bearer <token>`` of a known token, and refuses the rest
with UNAUTHENTICATED before the servicer sees the request. The servicer reads
the admitted identity with `caller()` and asks the gate what it may do:
its datasets (each entry the client names, and each file they resolve to),
user transform and collate modules, and priority classes. Each refusal is
counted in `Refusals` (shardstream_auth_refusals_total) and logged with the
caller's address, never with a token.

The file is read again about once a second (Service watches it); the gate
switches to a changed file's table after the decode actors have it, so a
token the service has just started to accept is accepted by the decoders too.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable, Iterator
from typing import Any

import grpc

from shardstream.proto.errors import (
    ERROR_METADATA_KEY,
    DatasetNotAllowed,
    PermissionDenied,
    TransformNotAllowed,
    Unauthenticated,
)
from shardstream.proto.job_options import JobOptions
from shardstream.service.control.access import DatasetAccess
from shardstream.service.identities import (
    Identity,
    IdentityFile,
    IdentityTable,
    Refusals,
    authenticate,
)
from shardstream.service.shares import DEFAULT_CLASS
from shardstream.service.transforms import module_allowed

# Methods any caller may call: kubelet's gRPC probes send no token.
OPEN_METHOD_PREFIXES = ("/grpc.health.v1.Health/",)

_CALLER: contextvars.ContextVar[Identity | None] = contextvars.ContextVar("shardstream_caller", default=None)


def caller() -> Identity | None:
    """The identity the interceptor admitted for the call being served; None without a tokens file."""
    return _CALLER.get()


class Gate:
    def __init__(self, identities: IdentityFile, refusals: Refusals,
                 on_unauthenticated: Callable[[], None] = lambda: None) -> None:
        self.file = identities
        self.table: IdentityTable = identities.table  # swapped whole when the file changes
        self.refusals = refusals
        self._on_unauthenticated = on_unauthenticated  # counts the call in shardstream_errors_total

    def interceptor(self) -> grpc.ServerInterceptor:
        return _Interceptor(self)

    def admit(self, context: grpc.ServicerContext, method: str) -> Identity:
        """The caller's identity, or the call aborted with UNAUTHENTICATED."""
        try:
            return authenticate(self.table, context.invocation_metadata(), method, self.refusals, context.peer())
        except Unauthenticated as exc:
            self._on_unauthenticated()
            context.set_trailing_metadata(((ERROR_METADATA_KEY, type(exc).__name__),))
            context.abort(exc.code, str(exc))
            raise AssertionError("context.abort returned") from None  # it always raises

    def check_open(self, identity: Identity, spec: JobOptions, priority: str, peer: str = "") -> None:
        """Refuse (PERMISSION_DENIED, naming the identity) a job spec that uses what `identity` is not
        granted: a priority class, a user transform or collate module, a dataset entry. The files an
        entry resolves to are checked as they are listed (`dataset_check`)."""
        name = identity.name
        wanted = priority or DEFAULT_CLASS
        if identity.priority_classes is not None and wanted not in identity.priority_classes:
            raise self.refusals.refuse(
                PermissionDenied, name, "priority", f"identity {name!r} may not use priority class {wanted!r}: "
                f"its priority classes are {_listed(identity.priority_classes)}", peer)
        for kind, named in (("transform", spec.transform), ("collate", spec.collate)):
            module, sep, _ = named.partition(":")
            if sep and identity.transform_modules is not None and not module_allowed(module,
                                                                                      identity.transform_modules):
                raise self.refusals.refuse(
                    TransformNotAllowed, name, "transform", f"identity {name!r} may not use {kind} module "
                    f"{module!r}: its transform modules are {_listed(identity.transform_modules)}", peer)
        check = self.dataset_check(identity, peer)
        if check is not None:
            for entry in spec.dataset:
                check(entry)

    def dataset_check(self, identity: Identity, peer: str = "") -> Callable[[str], None] | None:
        """The identity's own check of a dataset URL (DatasetNotAllowed naming it); None when its
        entry gives no dataset_prefixes (the service's allowed_dataset_prefixes alone apply)."""
        if identity.dataset_prefixes is None:
            return None
        access = _access(identity.dataset_prefixes)

        def check(url: str) -> None:
            why = access.refusal(url)
            if why is not None:
                dots = "; URLs with '.' or '..' components are not accepted" if why == "dots" else ""
                raise self.refusals.refuse(
                    DatasetNotAllowed, identity.name, "dataset", f"identity {identity.name!r} may not read "
                    f"{url!r}: its dataset prefixes are {_listed(access.prefixes)}{dots}", peer)

        return check

    def check_job(self, identity: Identity, job_id: str, owner: str, what: str, peer: str = "") -> None:
        """Refuse (PERMISSION_DENIED, naming the identity) a call about a job GetStatus would not show
        `identity` (`sees`): one `owner` opened, another identity, unless `identity` is an admin.
        `what`: the call's verb phrase, e.g. "list the decoders of"."""
        if not self.sees(identity, owner):
            raise self.refusals.refuse(
                PermissionDenied, identity.name, "job", f"identity {identity.name!r} may not {what} job "
                f"{job_id!r}: another identity opened it", peer)

    @staticmethod
    def sees(identity: Identity | None, owner: str) -> bool:
        """Whether GetStatus shows `identity` a job of `owner`, and ListDecoders and GetManifest answer
        it about one: its own, or all for an admin."""
        return identity is None or identity.admin or identity.name == owner


@functools.lru_cache(maxsize=256)
def _access(prefixes: tuple[str, ...]) -> DatasetAccess:
    return DatasetAccess(prefixes, none_means_any=False)


def _listed(values: tuple[str, ...]) -> str:
    return ", ".join(values) if values else "none"


class _Interceptor(grpc.ServerInterceptor):
    """Every method's handler wrapped so that it first admits the caller (Gate.admit)."""

    def __init__(self, gate: Gate) -> None:
        self._gate = gate

    def intercept_service(self, continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
                          handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        handler = continuation(handler_call_details)
        method: str = handler_call_details.method  # type: ignore[attr-defined]
        if handler is None or method.startswith(OPEN_METHOD_PREFIXES):
            return handler
        return _guarded(handler, method.rsplit("/", 1)[-1], self._gate)


def _guarded(handler: grpc.RpcMethodHandler, method: str, gate: Gate) -> grpc.RpcMethodHandler:
    """`handler`, of whichever kind, admitting the caller before its behavior runs, which sees the
    identity through `caller()`."""
    h: Any = handler
    kinds = {(False, False): ("unary_unary", grpc.unary_unary_rpc_method_handler),
             (False, True): ("unary_stream", grpc.unary_stream_rpc_method_handler),
             (True, False): ("stream_unary", grpc.stream_unary_rpc_method_handler),
             (True, True): ("stream_stream", grpc.stream_stream_rpc_method_handler)}
    attribute, make = kinds[(bool(h.request_streaming), bool(h.response_streaming))]
    behavior = getattr(h, attribute)

    def guarded(request: Any, context: grpc.ServicerContext) -> Any:
        token = _CALLER.set(gate.admit(context, method))
        try:
            return behavior(request, context)
        finally:
            _CALLER.reset(token)

    def guarded_stream(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        token = _CALLER.set(gate.admit(context, method))
        try:
            yield from behavior(request, context)
        finally:
            _CALLER.reset(token)

    wrapped = guarded_stream if h.response_streaming else guarded
    return make(wrapped, request_deserializer=h.request_deserializer,  # type: ignore[no-any-return]
                response_serializer=h.response_serializer)


__all__ = ["OPEN_METHOD_PREFIXES", "Gate", "caller"]
