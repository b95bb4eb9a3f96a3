"""`auth.secretName`: the tokens file's Secret is mounted whole (so the kubelet's updates reach it)
on the head only, the ConfigMap points the service's auth_tokens_file at it, and the probes still
use the open gRPC health service."""

from __future__ import annotations

import helm_python as helm
import pytest

from shardstream.service.config import ServiceConfig
from tests.chart.chart import CRD_KINDS, container, lint, pod_spec, port_named, render, validate

AUTH = {"auth": {"secretName": "shardstream-tokens"}}


def test_the_secret_is_mounted_on_the_head_and_the_service_reads_the_file_in_it() -> None:
    out = render(AUTH)
    (volume,) = [v for v in pod_spec(out.head)["volumes"] if v["name"] == "auth"]
    assert volume == {"name": "auth", "secret": {"secretName": "shardstream-tokens"}}  # whole: no items, no subPath
    (mount,) = [m for m in container(out.head, "head")["volumeMounts"] if m["name"] == "auth"]
    assert mount == {"name": "auth", "mountPath": "/var/run/secrets/shardstream/auth", "readOnly": True}
    assert out.config_map["SHARDSTREAM_AUTH_TOKENS_FILE"] == f"{mount['mountPath']}/tokens.yaml"
    assert ServiceConfig.load(environ=out.config_map).auth_tokens_file == f"{mount['mountPath']}/tokens.yaml"
    keyed = render({"auth": {"secretName": "shardstream-tokens", "key": "identities.json"}}).config_map
    assert keyed["SHARDSTREAM_AUTH_TOKENS_FILE"] == f"{mount['mountPath']}/identities.json"


def test_the_decode_workers_do_not_mount_it() -> None:
    """They run user transforms; they get the tokens' digests from the head over Ray instead."""
    decode = render(AUTH).decode
    assert all("shardstream-tokens" not in str(v) for v in pod_spec(decode)["volumes"])
    assert all(m["name"] != "auth" for c in pod_spec(decode)["containers"] for m in c.get("volumeMounts", []))


def test_without_it_no_tokens_are_asked() -> None:
    out = render()
    assert out.config_map["SHARDSTREAM_AUTH_TOKENS_FILE"] == ""
    assert ServiceConfig.load(environ=out.config_map).auth_tokens_file is None
    assert all(v["name"] != "auth" for v in pod_spec(out.head)["volumes"])


def test_the_head_probes_stay_on_the_open_health_service() -> None:
    head = container(render(AUTH).head, "head")
    assert head["readinessProbe"]["grpc"] == {"port": port_named(head, "grpc"), "service": "shardstream.v1.Loader"}
    assert head["livenessProbe"]["grpc"]["port"] == port_named(head, "grpc")


def test_the_manifests_validate_and_lint_with_auth_and_tls() -> None:
    values = {**AUTH, "tls": {"secretName": "loader-tls", "clientCA": True}}
    report = lint(values)
    assert report["errors"] == [] and [m for m in report["messages"] if m["severity"] >= 2] == [], report
    for doc in render(values).docs:
        if (doc["apiVersion"], doc["kind"]) not in CRD_KINDS:
            validate(doc)
    assert "--token-file" in render(AUTH).notes and "--token-file" not in render().notes


@pytest.mark.parametrize("values", [{"auth": {"secret": "x"}}, {"auth": {"secretName": "Bad_Name"}},
                                    {"auth": {"secretName": "x", "key": "a/b"}}, {"auth": {"key": ""}}])
def test_the_schema_refuses_bad_auth_values(values: dict[str, object]) -> None:
    with pytest.raises(helm.HelmValuesError):
        render(values)
