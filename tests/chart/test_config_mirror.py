"""The chart's config follows ServiceConfig: every setting is a `config` value (written by
`make chart-config`) or set by the chart itself (declared with `chart=`), and the ConfigMap loads
back into the service's config."""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from shardstream.service.config import ENV_PREFIX, ServiceConfig
from shardstream.service.settings import declared
from tests.chart.chart import CHART_DIR, ROOT, default_values, render

# Settings the chart sets from its own values instead of `config.*`.
CHART_OWNED = {f.name for f, spec, _ in declared(ServiceConfig) if spec.chart}
FIELDS = {f.name: f for f in dataclasses.fields(ServiceConfig)}


def _as_field_value(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def test_every_field_is_a_config_value_or_set_by_the_chart() -> None:
    config = default_values()["config"]
    assert set(config).isdisjoint(CHART_OWNED)
    assert set(config) | CHART_OWNED == set(FIELDS), (
        f"missing from helm/shardstream/values.yaml config: {sorted(set(FIELDS) - set(config) - CHART_OWNED)}; "
        f"not ServiceConfig fields: {sorted((set(config) | CHART_OWNED) - set(FIELDS))}")


def test_value_defaults_are_the_service_defaults() -> None:
    for name, value in default_values()["config"].items():
        assert _as_field_value(value) == FIELDS[name].default, name


def test_the_schema_describes_exactly_the_config_values() -> None:
    schema = json.loads((CHART_DIR / "values.schema.json").read_text())
    config = schema["properties"]["config"]
    assert set(config["properties"]) == set(default_values()["config"])
    assert config["additionalProperties"] is False


def test_the_configmap_has_one_key_per_field() -> None:
    for values in ({}, {"metrics": {"enabled": False}}, {"config": {"num_decoders": 4}}):
        data = render(values).config_map
        assert set(data) == {ENV_PREFIX + name.upper() for name in FIELDS}
        assert all(isinstance(v, str) for v in data.values())


def test_the_configmap_loads_into_the_service_config() -> None:
    config = {"num_decoders": 6, "decoder_cpus": 0.5, "allowed_transform_modules": ["acme.tf", "lab.aug"],
              "allowed_dataset_prefixes": ["gs://team-a/train", "s3://shared/public"],
              "decode_timeout_s": 12.5,
              "row_group_cache_bytes": 3 << 30, "local_copy_bytes": 200 << 30,
              "max_message_bytes": 1 << 28, "grpc_workers": 16,
              "max_request_bytes": 1 << 20, "job_idle_ttl_s": 90.0,
              "max_abandoned_storage_calls": 5, "prepared_cache_memory_bytes": 8 << 30,
              "prepared_cache": False, "prepared_cache_write_share": 0.25, "priority_classes": ["high=4", "batch=0.5"],
              "job_max_decoders": 8, "job_max_in_flight_bytes": 4 << 30, "job_max_cache_bytes": 16 << 30,
              "dataset_protocols": ["file", "gs", "hdfs"], "max_world_size": 4096, "max_batch_size": 8192,
              "max_shuffle_block": 1 << 20, "max_bucket_window": 100, "max_epoch": 10_000, "max_seq_len": 8192,
              "max_line_bytes": 1 << 20,
              "max_image_side": 1024, "max_dataset_entries": 500, "max_columns": 64, "max_url_chars": 512,
              "max_name_chars": 128, "max_jobs": 50, "max_args_bytes": 4096, "max_args_depth": 8,
              # with num_decoders set, the scaling policy is off (they exclude each other)
              "autoscale_max_decoders": None, "autoscale_min_decoders": 2, "autoscale_window_s": 5.0}
    assert set(config) == set(default_values()["config"]), "exercise every config value"
    data = render({"config": config, "service": {"port": 6001}, "metrics": {"port": 9300},
                   "decode": {"cpus": 4, "localCopy": {"mountPath": "/mnt/ssd/copy",
                                                       "preparedSamplesBytes": 100 << 30}}}).config_map
    loaded = ServiceConfig.load(environ=data)
    expected = ServiceConfig(host="0.0.0.0", port=6001, ray_address="auto", metrics_port=9300,
                             local_copy_dir="/mnt/ssd/copy", data_port_base=52000, data_ports=32,
                             prepared_cache_memory_dir="/dev/shm/shardstream-prepared",
                             prepared_cache_disk_dir="/mnt/ssd/copy/prepared-samples",
                             prepared_cache_disk_bytes=100 << 30,
                             **{k: _as_field_value(v) for k, v in config.items()})
    assert loaded == expected


def test_default_configmap_keeps_the_service_defaults() -> None:
    loaded = ServiceConfig.load(environ=render().config_map)
    mount_path = default_values()["decode"]["localCopy"]["mountPath"]
    assert loaded == ServiceConfig(host="0.0.0.0", port=50051, ray_address="auto", metrics_port=9090,
                                   local_copy_dir=mount_path, data_port_base=52000, data_ports=8,
                                   prepared_cache_memory_dir="/dev/shm/shardstream-prepared",
                                   prepared_cache_disk_dir=f"{mount_path}/prepared-samples",
                                   prepared_cache_disk_bytes=16 * 2**30)
    assert loaded.local_copy_bytes == 64 * 2**30 > 0  # on by default, in the decode workers' volume
    # the prepared cache too: its disk tier bounded to fit the volume's sizeLimit beside the local copy,
    # its memory tier sized by each node (the pod's /dev/shm and memory limit)
    assert loaded.prepared_cache and loaded.prepared_cache_memory_bytes is None
    size_limit = default_values()["decode"]["localCopy"]["sizeLimit"]
    assert size_limit.endswith("Gi") and int(size_limit[:-2]) * 2**30 > (
        loaded.local_copy_bytes + loaded.prepared_cache_disk_bytes) * 1.02
    unbounded = render({"decode": {"localCopy": {"preparedSamplesBytes": None}}}).config_map
    assert ServiceConfig.load(environ=unbounded).prepared_cache_disk_bytes is None
    loaded = ServiceConfig.load(environ=render({"metrics": {"enabled": False}}).config_map)
    assert loaded.metrics_port is None


def test_the_default_image_tag_is_the_package_version() -> None:
    version = re.search(r'^version = "([^"]+)"$', (ROOT / "pyproject.toml").read_text(), re.M)
    assert version
    image = render().head["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == f"shardstream:{version.group(1)}"
