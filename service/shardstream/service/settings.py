"""A service setting declared once: a dataclass field whose metadata says everything else.

`setting(default, help, ...)` is a dataclass field. From it come the
SHARDSTREAM_<NAME> environment variable, the `shardstream serve --<name>` flag
(parsed by the field's declared type), the bounds `__post_init__` checks, and
the Helm chart's `config:` value, schema entry and ConfigMap key
(service/chart_config.py writes them; `make chart-config-check` fails when they are
stale). A new setting is one field. Pure standard library: the CLI of a
training-side install builds its parser from it.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

ENV_PREFIX = "SHARDSTREAM_"


@dataclass(frozen=True)
class Setting:
    """What a field's metadata declares beyond its default."""

    help: str
    flag: str = ""  # "": --<name with dashes>; e.g. "--allow-transform-module" (repeatable for a list)
    metavar: str = ""
    minimum: float | None = None
    above: float | None = None  # exclusive minimum
    maximum: float | None = None
    chart: str = ""  # "": a `config.<name>` value of the chart; else how the chart sets it itself


def setting(default: Any, help: str, **declared: Any) -> Any:
    """A dataclass field of a settings class (see the module docstring)."""
    return dataclasses.field(default=default, metadata={"setting": Setting(help, **declared)})


@dataclass(frozen=True)
class Kind:
    """A field's declared type, as the environment, flags and chart see it."""

    base: type  # bool, int, float, str or tuple (of str)
    optional: bool  # None allowed (it means "the service decides")

    def parse(self, raw: str) -> Any:
        if self.base is tuple:
            return tuple(p.strip() for p in raw.split(",") if p.strip())
        if self.base is bool:
            return parse_bool(raw)
        return self.base(raw)


TRUE, FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def parse_bool(raw: str) -> bool:
    """A yes/no setting as a flag, the environment or the chart spells it."""
    word = raw.strip().lower()
    if word in TRUE or word in FALSE:
        return word in TRUE
    raise ValueError(f"expected one of {', '.join(TRUE + FALSE)}, got {raw!r}")


def declared(cls: type) -> list[tuple[dataclasses.Field[Any], Setting, Kind]]:
    """Every setting of `cls`, in declaration order."""
    hints = typing.get_type_hints(cls)
    return [(f, f.metadata["setting"], kind_of(hints[f.name])) for f in dataclasses.fields(cls)
            if "setting" in f.metadata]


def kind_of(hint: Any) -> Kind:
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    optional = isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union
    base = args[0] if optional else hint
    base = typing.get_origin(base) or base
    if base not in (bool, int, float, str, tuple):
        raise TypeError(f"a setting is bool, int, float, str or tuple[str, ...] (or that | None), not {hint}")
    return Kind(base, optional)


def check_bounds(instance: Any) -> None:
    """The declared bounds of every setting of `instance` (a ValueError naming the first broken one)."""
    for f, spec, _ in declared(type(instance)):
        value = getattr(instance, f.name)
        if value is None or isinstance(value, (bool, str, tuple)):
            continue
        if isinstance(value, float) and not math.isfinite(value):  # (nan passes every comparison below)
            raise ValueError(f"{f.name} must be a finite number, got {value}")
        if spec.minimum is not None and value < spec.minimum:
            raise ValueError(f"{f.name} must be >= {spec.minimum:g}, got {value}")
        if spec.above is not None and value <= spec.above:
            raise ValueError(f"{f.name} must be > {spec.above:g}, got {value}")
        if spec.maximum is not None and value > spec.maximum:
            raise ValueError(f"{f.name} must be <= {spec.maximum:g}, got {value}")


def env_name(name: str) -> str:
    return ENV_PREFIX + name.upper()


def from_environment(cls: type, environ: Mapping[str, str]) -> dict[str, Any]:
    """The settings of `cls` given as SHARDSTREAM_<NAME> (an empty value: the default)."""
    values: dict[str, Any] = {}
    for f, _, kind in declared(cls):
        raw = environ.get(env_name(f.name))
        if raw is None or raw == "":
            continue
        try:
            values[f.name] = kind.parse(raw)
        except ValueError as exc:
            raise ValueError(f"{env_name(f.name)}={raw!r}: {exc}") from None
    return values


def flag_of(name: str, spec: Setting) -> str:
    return spec.flag or "--" + name.replace("_", "-")


def add_flags(parser: argparse.ArgumentParser, cls: type) -> None:
    """One flag per setting of `cls` (none given: the environment's value, else the default)."""
    for f, spec, kind in declared(cls):
        default: Any = f.default
        shown = (",".join(default) if kind.base is tuple else "" if default is None
                 else str(default).lower() if kind.base is bool else str(default))
        text = f"{spec.help} (env {env_name(f.name)}; default: {shown or ('none' if kind.base is tuple else 'unset')})"
        if kind.base is tuple:
            parser.add_argument(flag_of(f.name, spec), dest=f.name, action="append", metavar=spec.metavar or None,
                                help=text + "; repeatable")
        else:
            parser.add_argument(flag_of(f.name, spec), dest=f.name, type=parse_bool if kind.base is bool else kind.base,
                                metavar=spec.metavar or ("true|false" if kind.base is bool else None), help=text)


def from_flags(args: argparse.Namespace, cls: type) -> dict[str, Any]:
    """The settings given as flags, as `cls` fields."""
    values: dict[str, Any] = {}
    for f, _, kind in declared(cls):
        value = getattr(args, f.name, None)
        if value is not None:
            values[f.name] = tuple(value) if kind.base is tuple else value
    return values


__all__ = ["ENV_PREFIX", "Kind", "Setting", "add_flags", "check_bounds", "declared", "env_name", "flag_of",
           "from_environment", "from_flags", "kind_of", "parse_bool", "setting"]
