"""Transform registry: built-ins by name, user transforms by import path.

A built-in's factory is given the service's request limits (limits.py) before the job's
arguments, so a job cannot name a bound of its own. A user transform is
``"package.module:factory"``; the factory is called with the job's transform args and returns an
object with ``prepare``/``augment`` (see ``base.SampleTransform``), optionally ``collate``,
``check_schema`` and ``check_collate``. Its module must start with one of the service's allowed
prefixes.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Sequence
from typing import Any, cast

from shardstream.proto.errors import InvalidJobSpec, TransformNotAllowed, UnknownTransform
from shardstream.service.limits import DEFAULT_LIMITS, RequestLimits
from shardstream.service.transforms.base import SampleTransform, collate, sample_rng


def _image(_limits: RequestLimits, **kwargs: Any) -> SampleTransform:  # its sizes are checked at open
    from shardstream.service.transforms.image import ImageTransform  # lazy: Pillow

    return ImageTransform(**kwargs)


def _tokenize(limits: RequestLimits, **kwargs: Any) -> SampleTransform:
    from shardstream.service.transforms.tokenize import (  # lazy: tokenizers
        PackedTokenize,
        TokenizeTransform,
    )

    # prepare alone: a transform needs one of prepare and augment (build_transform checks)
    kind = PackedTokenize if kwargs.get("pack") is not None else TokenizeTransform
    return cast(SampleTransform, kind(**kwargs, longest=limits.seq_len))


BUILTIN: dict[str, Callable[..., SampleTransform]] = {"image": _image, "tokenize": _tokenize}


def build_transform(name: str, kwargs: dict[str, Any], allowed_modules: tuple[str, ...],
                    limits: RequestLimits = DEFAULT_LIMITS) -> SampleTransform | None:
    """The transform named in a job spec, or None for plain columns."""
    if not name:
        return None
    builtin = BUILTIN.get(name)
    factory = functools.partial(builtin, limits) if builtin is not None else _import_factory(name, allowed_modules)
    try:
        transform = factory(**kwargs)
    except TypeError as exc:
        raise InvalidJobSpec(f"transform {name!r} rejected its arguments {kwargs}: {exc}") from None
    if not callable(getattr(transform, "prepare", None)) and not callable(getattr(transform, "augment", None)):
        raise UnknownTransform(f"transform {name!r} returned {type(transform).__name__}, "
                               "which has neither prepare() nor augment()")
    return transform


def _import_factory(name: str, allowed_modules: tuple[str, ...]) -> Callable[..., SampleTransform]:
    module_name, sep, attr = name.partition(":")
    if not sep or not module_name or not attr:
        raise UnknownTransform(
            f"unknown transform {name!r}: built-ins are {sorted(BUILTIN)}; "
            "a user transform is named 'package.module:factory'"
        )
    return import_allowed(name, allowed_modules, "transform")  # type: ignore[no-any-return]


def module_allowed(module_name: str, prefixes: Sequence[str]) -> bool:
    """Whether `module_name` is one of `prefixes` or inside one (at a dot: `acme` admits `acme.tf`,
    not `acmex`)."""
    return any(module_name == p or module_name.startswith(p.rstrip(".") + ".") for p in prefixes)


def import_allowed(name: str, allowed_modules: tuple[str, ...], kind: str) -> Callable[..., Any]:
    """The callable `package.module:attr` names, when its module is under an allowed prefix (the
    service's --allow-transform-module): user transforms and user collates alike."""
    module_name, _, attr = name.partition(":")
    if not module_allowed(module_name, allowed_modules):
        raise TransformNotAllowed(
            f"{kind} module {module_name!r} is not allowed on this service "
            f"(allowed prefixes: {list(allowed_modules) or 'none'}; see --allow-transform-module)"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UnknownTransform(f"{kind} module {module_name!r} is not installed on the service: {exc}") from None
    found = getattr(module, attr, None)
    if not callable(found):
        raise UnknownTransform(f"{module_name!r} has no callable {attr!r}")
    return found  # type: ignore[no-any-return]


__all__ = ["BUILTIN", "SampleTransform", "build_transform", "collate", "import_allowed", "module_allowed",
           "sample_rng"]
