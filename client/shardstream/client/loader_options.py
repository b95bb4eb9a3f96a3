"""RemoteLoader's keywords, derived from the declarations: the job's options (JobOptions, in the
shared proto package) and the loader's own settings (LoaderSettings, here), each declared once
with `option()`.

The options DataLoader users know are flat keywords; the rest come in four groups, each a frozen
dataclass made from the declarations of its group (`OrderOptions`, `FormatOptions`,
`DeliveryOptions`, `SecurityOptions`). Every grouped option is still taken as a flat keyword, as
before the groups existed. `split()` turns a call's keywords into the job's options and the
loader's settings; `signature()` and `docstring()` are what `help(RemoteLoader)` shows.
"""

from __future__ import annotations

import dataclasses
import inspect
import textwrap
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from shardstream.client.tls import TLS
from shardstream.proto.job_options import JobOptions, Option, check_declared, option


def _at_least_one(name: str) -> Any:
    return lambda v: None if v is None or v >= 1 else f"{name} must be >= 1, got {v}"


@dataclass(frozen=True)
class LoaderSettings:
    """How this rank's loader fetches and delivers the job's batches: not part of the job."""

    rank: int | None = option(None, "this rank; default torch.distributed's, else RANK, else 0")
    pin_memory: bool | str = option(
        "auto", '"auto" pins batches when CUDA is available; False never pins',
        check=lambda v: None if v in ("auto", True, False) else f"pin_memory must be 'auto', True or False, got {v!r}")
    prefetch: int = option(4, "batches fetched ahead of the training loop (and decoded ahead on the decoders), "
                           "counting the batch the loop is working on", check=_at_least_one("prefetch"))
    job_name: str | None = option(
        None, "ranks of one job share it. Default: the run (SHARDSTREAM_JOB_NAME, else torchrun's run id), this "
        "loader's place among the process's loaders, and the world size, so a script's train and validation "
        "loaders are two jobs without naming them")
    timeout: float = option(300.0, "seconds any single wait (a batch, the job opening) may take before "
                            "DeadlineExceeded")
    prefetch_bytes: int | None = option(
        None, "the most bytes of batches received or in flight and not yet consumed by the loop (the memory "
        "prefetching may use; a step in flight counts as the largest batch so far); None: 512 MiB. Lowered to "
        "the service's job_max_in_flight_bytes / world size when it sets one (window_bytes). A batch larger "
        "than the room its request had is asked for again once there is that much room; one larger than the "
        "window is a BatchExceedsWindow", group="delivery", check=_at_least_one("prefetch_bytes"))
    connect_timeout: float = option(30.0, "seconds to wait for the service to become reachable", group="delivery")
    reconnect_timeout: float | None = option(
        None, "seconds to keep reconnecting after the link to the service breaks mid-epoch (default: timeout); "
        "the stream resumes at the next batch", group="delivery")
    shared_memory: bool = option(
        True, "let decoders on this host write batches into shared memory (/dev/shm) instead of sending them "
        "through a socket (docs/data-plane.md); False: always the network path", group="delivery")
    bulk_socket: bool = option(
        True, "take batch bytes from decoders on other hosts on a plain socket (TLS when the service speaks "
        "it) beside each gRPC stream, which is cheaper to receive than a gRPC message (docs/data-plane.md); "
        "False: bytes come on the gRPC stream", group="delivery")
    priority: str | None = option(
        None, "the job's priority class on a shared service (one of its priority_classes): each decoder "
        "shares its time between the jobs waiting on it by their classes' weights, whatever their rank "
        "counts. None: default. Every rank names the same class", group="delivery")
    tls: TLS | None = option(  # noqa: RUF009 (a field declaration, as dataclasses.field)
        None, "TLS(...) when the service's port speaks TLS; None takes it from SHARDSTREAM_CLIENT_TLS_* "
        "variables if any is set (TLS.from_env), else plaintext", group="security")
    token: str | None = option(
        None, "for a service that asks for tokens (its auth_tokens_file, docs/identities.md). None: "
        "SHARDSTREAM_TOKEN, else the file SHARDSTREAM_TOKEN_FILE names, else no token. Sent to the service "
        "and every decoder as `authorization: Bearer <token>`; use TLS where the network is not trusted",
        group="security")
    token_file: str | None = option(
        None, "a file holding the token, read again at each call that sends it (a rotated Secret is picked "
        "up)", group="security")

    def __post_init__(self) -> None:
        check_declared(self)


# ------------------------------------------------------------------ derived from the declarations

# The loader's own parameters, before every option (they are not options).
POSITIONAL = ("address", "dataset", "batch_size")
_SOURCES = (JobOptions, LoaderSettings)


def _declared() -> list[tuple[dataclasses.Field[Any], Option, Any]]:
    out = []
    for cls in _SOURCES:
        hints = typing.get_type_hints(cls, globalns={**vars(typing), "TLS": TLS, "Mapping": Mapping})
        out += [(f, f.metadata["option"], hints[f.name]) for f in dataclasses.fields(cls)]
    return out


DECLARED = _declared()
JOB_NAMES = frozenset(f.name for f in dataclasses.fields(JobOptions))
FLAT = [f.name for f, o, _ in DECLARED if not o.group and f.name not in POSITIONAL]


def _group_class(group: str, name: str, what: str) -> type:
    """A frozen dataclass of one group's options, each None ("not given") unless set."""
    members = [(f.name, hint | None, dataclasses.field(default=None)) for f, o, hint in DECLARED if o.group == group]
    cls = dataclasses.make_dataclass(name, members, frozen=True)
    cls.__module__ = __name__  # pickled and shown as this module's
    cls.group = group  # type: ignore[attr-defined]
    cls.__doc__ = f"{what}\n\n" + _args(group, indent=4) + "\n\nAn option left None takes its default."
    return cls


def _args(group: str, indent: int) -> str:
    lines = []
    for f, o, _ in DECLARED:
        if o.group == group and f.name not in POSITIONAL[:1]:
            told = f.default is None or f.name in POSITIONAL or "default" in o.help.lower()
            default = "" if told else f" Default: {f.default!r}."
            lines.append(textwrap.fill(f"{f.name}: {o.help}.{default}", 100 - indent, initial_indent=" " * indent,
                                       subsequent_indent=" " * (indent + 4)))
    return "\n".join(lines)


OrderOptions = _group_class("order", "OrderOptions", "Which samples an epoch draws, in which order, and the "
                            "seed of their augmentations, beyond shuffle and seed (docs/order-modes.md).")
FormatOptions = _group_class("format", "FormatOptions", "How the dataset's files are read and how samples "
                             "become a batch.")
DeliveryOptions = _group_class("delivery", "DeliveryOptions", "How batches reach this rank.")
SecurityOptions = _group_class("security", "SecurityOptions", "How this rank proves itself to the service.")
GROUP_KEYWORDS = {"order": OrderOptions, "format_options": FormatOptions, "delivery": DeliveryOptions,
                  "security": SecurityOptions}


def split(groups: Mapping[str, Any], flat: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A call's keywords as (the job's options, the loader's settings); a keyword that is no
    option, or one given both in a group and flat, is a TypeError as Python's own would be."""
    given = dict(flat)
    unknown = sorted(set(flat) - {f.name for f, _, _ in DECLARED})
    if unknown:
        raise TypeError(f"RemoteLoader() got an unexpected keyword argument {unknown[0]!r}")
    for keyword, value in groups.items():
        if value is None:
            continue
        if not isinstance(value, GROUP_KEYWORDS[keyword]):
            raise TypeError(f"{keyword} must be a {GROUP_KEYWORDS[keyword].__name__}, got {type(value).__name__}")
        for f in dataclasses.fields(value):  # type: ignore[arg-type]  # a group class, checked above
            member = getattr(value, f.name)
            if member is None:
                continue
            if f.name in given:
                raise TypeError(f"RemoteLoader() got {f.name} twice: in {keyword} and as a keyword")
            given[f.name] = member
    job = {k: v for k, v in given.items() if k in JOB_NAMES}
    return job, {k: v for k, v in given.items() if k not in JOB_NAMES}


def signature() -> inspect.Signature:
    """RemoteLoader's: the loader's three, the flat options, the groups, then any grouped option flat."""
    kw = inspect.Parameter.KEYWORD_ONLY
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    hints = {f.name: hint for f, _, hint in DECLARED}
    params += [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=hints.get(n, str))
               for n in POSITIONAL]
    params += [inspect.Parameter(f.name, kw, default=f.default if f.name != "world_size" else None,
                                 annotation=hint)
               for f, o, hint in DECLARED if not o.group and f.name not in POSITIONAL]
    params += [inspect.Parameter(k, kw, default=None, annotation=cls | None) for k, cls in GROUP_KEYWORDS.items()]
    params.append(inspect.Parameter("options", inspect.Parameter.VAR_KEYWORD, annotation=Any))
    return inspect.Signature(params)


def docstring(summary: str) -> str:
    """RemoteLoader's docstring: `summary`, then every keyword from its declaration."""
    sections = [summary.rstrip(), "", "Args:", "    address: host:port of the service.", _args("", indent=4)]
    for keyword, cls in GROUP_KEYWORDS.items():
        sections += ["", f"{keyword} ({cls.__name__}): {(cls.__doc__ or '').splitlines()[0]}",
                     "    Each is also taken as a flat keyword.", _args(cls.group, indent=4)]  # type: ignore[attr-defined]
    return "\n".join(sections) + "\n"


__all__ = ["DeliveryOptions", "FormatOptions", "LoaderSettings", "OrderOptions", "SecurityOptions", "docstring",
           "signature", "split"]
