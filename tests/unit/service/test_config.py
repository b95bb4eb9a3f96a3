"""ServiceConfig.load: defaults -> SHARDSTREAM_* env -> overrides, and validation."""

from __future__ import annotations

from typing import Any

import pytest

from shardstream.service.config import ENV_PREFIX, ServiceConfig


def test_defaults_without_env_or_overrides() -> None:
    assert ServiceConfig.load(environ={}) == ServiceConfig()


def test_load_does_not_read_os_environ_when_environ_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHARDSTREAM_PORT", "1234")
    assert ServiceConfig.load(environ={}).port == ServiceConfig().port
    assert ServiceConfig.load().port == 1234


def test_env_values_are_parsed_to_field_types() -> None:
    env = {
        "SHARDSTREAM_HOST": "0.0.0.0",
        "SHARDSTREAM_PORT": "6000",
        "SHARDSTREAM_RAY_ADDRESS": "ray://head:10001",
        "SHARDSTREAM_NUM_DECODERS": "3",
        "SHARDSTREAM_DECODER_CPUS": "0.5",
        "SHARDSTREAM_ALLOWED_TRANSFORM_MODULES": " a.b, c ,,",
        "SHARDSTREAM_OBJECT_STORE_MEMORY": "1048576",
        "SHARDSTREAM_DECODE_TIMEOUT_S": "12.5",
    }
    cfg = ServiceConfig.load(environ=env)
    assert cfg.host == "0.0.0.0"
    assert cfg.port == 6000 and isinstance(cfg.port, int)
    assert cfg.ray_address == "ray://head:10001"
    assert cfg.num_decoders == 3 and isinstance(cfg.num_decoders, int)
    assert cfg.decoder_cpus == 0.5
    assert cfg.allowed_transform_modules == ("a.b", "c")
    assert cfg.object_store_memory == 1048576
    assert cfg.decode_timeout_s == 12.5
    assert cfg.address == "0.0.0.0:6000"


def test_empty_env_values_are_ignored() -> None:
    cfg = ServiceConfig.load(environ={"SHARDSTREAM_PORT": "", "SHARDSTREAM_NUM_DECODERS": ""})
    assert cfg.port == ServiceConfig().port
    assert cfg.num_decoders is None


def test_unprefixed_env_is_ignored() -> None:
    assert ServiceConfig.load(environ={"PORT": "1", "shardstream_port": "2"}).port == 50051


def test_overrides_beat_env_and_none_overrides_are_ignored() -> None:
    env = {"SHARDSTREAM_PORT": "6000", "SHARDSTREAM_DECODER_CPUS": "2"}
    cfg = ServiceConfig.load(overrides={"port": 7000, "decoder_cpus": None}, environ=env)
    assert cfg.port == 7000
    assert cfg.decoder_cpus == 2.0


def test_bad_env_value_names_the_variable() -> None:
    with pytest.raises(ValueError, match=f"{ENV_PREFIX}PORT='eighty'"):
        ServiceConfig.load(environ={"SHARDSTREAM_PORT": "eighty"})


def test_env_values_are_validated() -> None:
    with pytest.raises(ValueError, match="port"):
        ServiceConfig.load(environ={"SHARDSTREAM_PORT": "70000"})


@pytest.mark.parametrize(("overrides", "needle"), [
    ({"port": -1}, "port"),
    ({"port": 65536}, "port"),
    ({"num_decoders": 0}, "num_decoders"),
    ({"decoder_cpus": 0}, "decoder_cpus"),
    ({"decode_timeout_s": 0}, "decode_timeout_s"),
    ({"grpc_workers": 1}, "grpc_workers"),
    ({"max_abandoned_storage_calls": 0}, "max_abandoned_storage_calls"),
    ({"local_copy_bytes": -1}, "local_copy_bytes"),
    ({"data_ports": 0}, "data_ports"),
    ({"data_port_base": 65530, "data_ports": 7}, "data_port_base"),
])
def test_invalid_values_are_refused(overrides: dict[str, Any], needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        ServiceConfig.load(overrides=overrides, environ={})


@pytest.mark.parametrize("overrides", [
    {"port": 0}, {"port": 65535}, {"num_decoders": 1},
    {"grpc_workers": 2}, {"max_abandoned_storage_calls": 1}, {"local_copy_bytes": 0},
    {"data_port_base": 65530, "data_ports": 6},
])
def test_boundary_values_are_accepted(overrides: dict[str, Any]) -> None:
    cfg = ServiceConfig.load(overrides=overrides, environ={})
    for key, value in overrides.items():
        assert getattr(cfg, key) == value


def test_config_is_frozen() -> None:
    cfg = ServiceConfig()
    with pytest.raises(AttributeError):
        cfg.port = 1  # type: ignore[misc]


@pytest.mark.parametrize(("overrides", "needle"), [
    ({"tls_cert_file": "c.pem"}, "go together"),
    ({"tls_key_file": "k.pem"}, "go together"),
    ({"tls_client_ca_file": "ca.pem"}, "needs TLS on"),
])
def test_tls_settings_that_cannot_work_are_refused(overrides: dict[str, Any], needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        ServiceConfig.load(overrides=overrides, environ={})
