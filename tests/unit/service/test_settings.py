"""A setting is declared once (settings.py): its flag, environment variable, bounds and chart entry
come from the field."""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from shardstream.service.cli import main
from shardstream.service.config import ServiceConfig
from shardstream.service.settings import (
    add_flags,
    declared,
    env_name,
    flag_of,
    from_environment,
    from_flags,
    setting,
)

# The chart's config writer is a build tool beside the package (service/chart_config.py, `make chart-config`).
_CHART_CONFIG = importlib.util.spec_from_file_location(
    "chart_config", Path(__file__).resolve().parents[3] / "service" / "chart_config.py")
assert _CHART_CONFIG is not None and _CHART_CONFIG.loader is not None
chart_config = importlib.util.module_from_spec(_CHART_CONFIG)
_CHART_CONFIG.loader.exec_module(chart_config)

# A value of each setting unlike its default, as the command line and the environment spell it.
SPELLED = {int: ("7", 7), float: ("2.5", 2.5), str: ("x.y", "x.y"), tuple: ("a.b", ("a.b",)), bool: ("false", False)}


@dataclass(frozen=True)
class Toy:
    workers: int = setting(4, "how many workers", minimum=1)
    ratio: float | None = setting(None, "a ratio", above=0, maximum=1)
    names: tuple[str, ...] = setting((), "a name", flag="--name", metavar="NAME")
    mode: str = setting("fast", "the mode", chart="set by the chart")


def _parser(cls: type) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add_flags(parser, cls)
    return parser


def test_every_service_config_field_is_a_declared_setting() -> None:
    assert [f.name for f, *_ in declared(ServiceConfig)] == [f.name for f in dataclasses.fields(ServiceConfig)]
    assert all(spec.help for _, spec, _ in declared(ServiceConfig))


def test_a_new_setting_is_a_flag_an_environment_variable_and_a_chart_value() -> None:
    args = _parser(Toy).parse_args(["--workers", "8", "--name", "a", "--name", "b", "--ratio", "0.5"])
    assert from_flags(args, Toy) == {"workers": 8, "names": ("a", "b"), "ratio": 0.5}
    assert from_environment(Toy, {"SHARDSTREAM_WORKERS": "9", "SHARDSTREAM_NAMES": "a, b",
                                  "SHARDSTREAM_RATIO": ""}) == {"workers": 9, "names": ("a", "b")}
    assert from_flags(_parser(Toy).parse_args([]), Toy) == {}


def test_flag_help_names_the_environment_variable_and_default() -> None:
    text = _parser(Toy).format_help()
    assert "SHARDSTREAM_WORKERS; default: 4" in text and "SHARDSTREAM_RATIO; default: unset" in text
    assert "--name NAME" in text and "repeatable" in text


def test_every_setting_has_a_serve_flag_of_its_type() -> None:
    """`shardstream serve --<flag> V` gives the same config as SHARDSTREAM_<NAME>=V."""
    parser = argparse.ArgumentParser()
    add_flags(parser, ServiceConfig)
    for f, spec, kind in declared(ServiceConfig):
        raw, value = SPELLED[kind.base]
        args = parser.parse_args([flag_of(f.name, spec), raw])
        assert from_flags(args, ServiceConfig) == {f.name: value} == from_environment(
            ServiceConfig, {env_name(f.name): raw}), f.name


@pytest.mark.parametrize("flag", ["--allow-transform-module", "--allow-dataset-prefix", "--tls-cert", "--tls-key",
                                  "--tls-client-ca", "--num-decoders", "--metrics-port", "--local-copy-bytes"])
def test_documented_flag_names_are_kept(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    assert f"{flag} " in capsys.readouterr().out


@pytest.mark.parametrize(("values", "needle"), [
    ({"workers": 0}, "workers must be >= 1, got 0"),
    ({"ratio": 0.0}, "ratio must be > 0, got 0.0"),
    ({"ratio": 1.5}, "ratio must be <= 1, got 1.5"),
    ({"ratio": float("nan")}, "ratio must be a finite number, got nan"),
    ({"ratio": float("-inf")}, "ratio must be a finite number, got -inf"),
])
def test_declared_bounds_are_checked(values: dict[str, Any], needle: str) -> None:
    @dataclass(frozen=True)
    class Checked(Toy):
        def __post_init__(self) -> None:
            from shardstream.service.settings import check_bounds

            check_bounds(self)

    Checked(workers=1, ratio=1.0)
    with pytest.raises(ValueError, match=needle):
        Checked(**values)


def test_a_setting_of_an_unsupported_type_is_refused() -> None:
    @dataclass(frozen=True)
    class Bad:
        ports: bytes = setting(b"", "ports")

    with pytest.raises(TypeError, match="int, float, str or tuple"):
        declared(Bad)


def test_the_chart_schema_follows_the_declaration() -> None:
    schema = chart_config.config_schema()
    assert set(schema["properties"]) == {f.name for f, spec, _ in declared(ServiceConfig) if not spec.chart}
    assert schema["properties"]["num_decoders"]["type"] == ["integer", "null"]
    assert schema["properties"]["num_decoders"]["minimum"] == 1
    assert schema["properties"]["decoder_cpus"]["exclusiveMinimum"] == 0
    assert "num_decoders" not in schema["required"] and "decoder_cpus" in schema["required"]


def test_the_checked_in_chart_files_are_current() -> None:
    assert chart_config.main(["--check"]) == 0, "run 'make chart-config'"


def test_a_yes_no_setting_takes_the_usual_spellings_and_refuses_others() -> None:
    parser = argparse.ArgumentParser()
    add_flags(parser, ServiceConfig)
    for raw, value in (("false", False), ("0", False), ("Off", False), ("no", False), ("true", True), ("on", True)):
        assert from_environment(ServiceConfig, {"SHARDSTREAM_PREPARED_CACHE": raw}) == {"prepared_cache": value}
        assert from_flags(parser.parse_args(["--prepared-cache", raw]), ServiceConfig) == {"prepared_cache": value}
    with pytest.raises(ValueError, match="SHARDSTREAM_PREPARED_CACHE='maybe'"):
        from_environment(ServiceConfig, {"SHARDSTREAM_PREPARED_CACHE": "maybe"})
    assert "--prepared-cache true|false" in parser.format_help()
    assert "default: true)" in parser.format_help()


@pytest.mark.parametrize(("argv", "environment", "needle"), [
    (["--num-decoders", "0"], {}, "num_decoders must be >= 1, got 0"),
    (["--prepared-cache-write-share", "0"], {}, "prepared_cache_write_share must be > 0, got 0.0"),
    ([], {"SHARDSTREAM_PREPARED_CACHE_WRITE_SHARE": "half"}, "SHARDSTREAM_PREPARED_CACHE_WRITE_SHARE='half'"),
    ([], {"SHARDSTREAM_DECODE_TIMEOUT_S": "nan"}, "decode_timeout_s must be a finite number, got nan"),
])
def test_serve_with_a_wrong_setting_says_which_and_exits_2_before_starting_anything(
        argv: list[str], environment: dict[str, str], needle: str, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    with caplog.at_level("ERROR"):
        assert main(["serve", *argv]) == 2
    assert needle in caplog.text and "--help" in caplog.text
