"""The chart rendered by the real Helm engine: lint, strict Kubernetes schemas, invariants."""

from __future__ import annotations

import copy
import json
from typing import Any

import helm_python as helm
import pytest
from kubernetes_validate import ValidationError

from shardstream.service.config import ServiceConfig
from tests.chart.chart import (
    CRD_KINDS,
    FULLNAME,
    NAMESPACE,
    RELEASE,
    command_line,
    container,
    containers,
    default_values,
    env_of,
    flags,
    lint,
    pod_spec,
    port_named,
    render,
    script,
    validate,
)

VALUE_SETS: dict[str, dict[str, Any]] = {
    "default": {},
    "decoders-scaled": {"decode": {"replicas": 7, "cpus": 6}},
    "hpa": {"decode": {"autoscaling": {"enabled": True, "minReplicas": 2, "maxReplicas": 12,
                                       "targetCPUUtilizationPercentage": 60}}},
    "metrics-and-servicemonitor": {"metrics": {"enabled": True, "port": 9191, "serviceMonitor": {
        "enabled": True, "interval": "15s", "labels": {"release": "prometheus"}}}},
    "metrics-off": {"metrics": {"enabled": False, "serviceMonitor": {"enabled": True}}},
    "credentials-secret": {"gcp": {"credentialsSecret": "gcp-key", "credentialsKey": "sa.json"}},
    "mutual-tls": {"tls": {"secretName": "loader-tls", "clientCA": True}},
    "workload-identity": {"serviceAccount": {"annotations": {
        "iam.gke.io/gcp-service-account": "loader@project.iam.gserviceaccount.com"}}},
    "local-copy-hostpath": {"decode": {"localCopy": {"mountPath": "/mnt/nvme/shardstream", "volume": {
        "hostPath": {"path": "/mnt/nvme/shardstream", "type": "DirectoryOrCreate"}}}}},
    "local-copy-ephemeral": {"decode": {"localCopy": {"volume": {"ephemeral": {"volumeClaimTemplate": {
        "metadata": {"labels": {"app": "shardstream-local-copy"}},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "local-ssd",
                 "resources": {"requests": {"storage": "400Gi"}}}}}}}}},
    "everything-set": {
        "image": {"repository": "registry.example/ml/shardstream", "tag": "1.2.3", "pullPolicy": "Always"},
        "imagePullSecrets": [{"name": "regcred"}],
        "serviceAccount": {"create": False, "name": "existing-sa"},
        "config": {"num_decoders": 8, "decoder_cpus": 0.5, "allowed_transform_modules": ["acme.tf", "lab.aug"],
                   "decode_timeout_s": 30.5, "row_group_cache_bytes": 1 << 30},
        "service": {"type": "LoadBalancer", "port": 7000, "annotations": {"a": "b"}},
        "ray": {"objectStoreMemory": 4 << 30, "tempDirSizeLimit": "10Gi", "auth": {"existingSecret": "ray-token"}},
        "shm": {"sizeLimit": "8Gi"},
        "tmp": {"sizeLimit": "1Gi"},
        "extraEnv": [{"name": "FOO", "value": "bar"}],
        "extraEnvFrom": [{"secretRef": {"name": "aws-credentials"}}],
        "extraVolumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "datasets"}}],
        "extraVolumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": True}],
        "head": {"nodeSelector": {"pool": "cpu"}, "priorityClassName": "high",
                 "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "loader", "effect": "NoSchedule"}],
                 "podDisruptionBudget": {"enabled": True, "maxUnavailable": 0},
                 "rayStartParams": {"min-worker-port": 11000, "max-worker-port": 11999}},
        "decode": {"replicas": 3, "cpus": 8, "nodeSelector": {"pool": "decode"},
                   "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
                       "weight": 100, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                                                          "labelSelector": {"matchLabels": {"app": "x"}}}}]}},
                   "podDisruptionBudget": {"maxUnavailable": "25%"},
                   "rayStartParams": {"object-manager-port": 8076}},
    },
}


@pytest.fixture(scope="module", params=sorted(VALUE_SETS))
def rendered(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any], Any]:
    values = VALUE_SETS[request.param]
    return request.param, values, render(values)


def test_lint_passes_for_every_value_set() -> None:
    for name, values in VALUE_SETS.items():
        report = lint(values)
        problems = [m for m in report["messages"] if m["severity"] >= 2]
        assert report["errors"] == [] and problems == [], (name, report)


def test_lint_fails_a_broken_value_set() -> None:
    report = lint({"decode": {"replicas": "many"}})
    assert report["errors"] or any(m["severity"] >= 3 for m in report["messages"]), report


def test_every_manifest_validates_strictly(rendered: tuple[str, dict[str, Any], Any]) -> None:
    name, _, out = rendered
    assert out.docs, name
    for doc in out.docs:
        if (doc["apiVersion"], doc["kind"]) in CRD_KINDS:
            # A CRD's kind (ServiceMonitor): kubernetes-validate ships no schema for it, so only
            # its shape is checked, by test_servicemonitor_scrapes_the_metrics_port.
            continue
        validate(doc)
        assert doc["metadata"].get("namespace") in (None, NAMESPACE)


def test_strict_validation_rejects_an_unknown_field() -> None:
    bad = copy.deepcopy(render().head)
    pod_spec(bad)["containers"][0]["livenessProbes"] = {}
    with pytest.raises(ValidationError):
        validate(bad)


def test_the_schema_rejects_typos_and_impossible_values() -> None:
    for values in ({"decode": {"replica": 3}}, {"config": {"port": 1}}, {"config": {"num_decoders": 0}},
                   {"shm": {"sizeLimit": "lots"}}, {"decode": {"autoscaling": {"enabled": "yes"}}}):
        with pytest.raises(helm.HelmValuesError):
            render(values)
    with pytest.raises(helm.HelmError, match=r"decode\.cpus"):
        render({"decode": {"cpus": 1}, "config": {"decoder_cpus": 2}})


def test_the_resources_a_release_creates() -> None:
    assert render().keys() == {
        ("ConfigMap", f"{FULLNAME}-config"), ("Service", FULLNAME), ("Service", f"{FULLNAME}-ray-head"),
        ("Deployment", f"{FULLNAME}-head"), ("Deployment", f"{FULLNAME}-decode"),
        ("PodDisruptionBudget", f"{FULLNAME}-decode"), ("ServiceAccount", FULLNAME)}


def _by_kind_and_name(out: Any) -> dict[tuple[str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"]["name"]): d for d in out.docs}


def test_decode_replicas_change_only_the_decode_workload() -> None:
    base, scaled = _by_kind_and_name(render()), _by_kind_and_name(render({"decode": {"replicas": 7}}))
    assert base.keys() == scaled.keys()
    changed = sorted(k for k in base if base[k] != scaled[k])
    assert changed == [("Deployment", f"{FULLNAME}-decode")]
    before, after = copy.deepcopy(base[changed[0]]), copy.deepcopy(scaled[changed[0]])
    assert (before["spec"].pop("replicas"), after["spec"].pop("replicas")) == (2, 7)
    assert before == after
    assert scaled[("Deployment", f"{FULLNAME}-head")]["spec"]["replicas"] == 1


def test_hpa_targets_the_decode_workload_only() -> None:
    values = VALUE_SETS["hpa"]
    out = render(values)
    (hpa,) = out.of_kind("HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                             "name": out.decode["metadata"]["name"]}
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 12)
    (metric,) = hpa["spec"]["metrics"]
    assert metric["resource"] == {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 60}}
    assert "replicas" not in out.decode["spec"]
    assert out.head["spec"]["replicas"] == 1
    # Utilization needs CPU requests on the decode pods.
    assert container(out.decode, "decode")["resources"]["requests"]["cpu"]
    assert render().of_kind("HorizontalPodAutoscaler") == []


def test_head_probes_use_the_grpc_port() -> None:
    out = render({"service": {"port": 6000}})
    head = container(out.head, "head")
    assert port_named(head, "grpc") == 6000
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert set(head[probe]) & {"grpc", "httpGet", "tcpSocket", "exec"} == {"grpc"}, probe
        assert head[probe]["grpc"]["port"] == 6000, probe
        assert head[probe]["grpc"].get("service", "") in ("", "shardstream.v1.Loader")
    serve = flags(command_line(script(head), "exec shardstream serve"))
    assert serve["port"] == "6000" and serve["host"] == "0.0.0.0"
    assert out.config_map["SHARDSTREAM_PORT"] == "6000"
    ports = {p["name"]: p for p in out.get("Service", FULLNAME)["spec"]["ports"]}
    assert ports["grpc"]["port"] == 6000 and ports["grpc"]["targetPort"] == "grpc"


def test_decode_probes_check_the_workers_raylet() -> None:
    out = render({"decode": {"rayStartParams": {"node-manager-port": 7100}}})
    decode = container(out.decode, "decode")
    ray = flags(command_line(script(decode), "exec ray start"))
    assert port_named(decode, "raylet") == int(ray["node-manager-port"]) == 7100
    for probe in ("readinessProbe", "livenessProbe"):
        assert decode[probe]["tcpSocket"] == {"port": "raylet"}, probe


def test_dev_shm_is_a_memory_emptydir_of_the_configured_size() -> None:
    out = render({"shm": {"sizeLimit": "3Gi"}})
    for workload in (out.head, out.decode):
        volumes = {v["name"]: v for v in pod_spec(workload)["volumes"]}
        for c in containers(workload, init=False):
            (mount,) = [m for m in c["volumeMounts"] if m["mountPath"] == "/dev/shm"]
            assert volumes[mount["name"]]["emptyDir"] == {"medium": "Memory", "sizeLimit": "3Gi"}


def test_pods_run_as_non_root_with_a_read_only_root(rendered: tuple[str, dict[str, Any], Any]) -> None:
    _, _, out = rendered
    for workload in (out.head, out.decode):
        spec = pod_spec(workload)
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] != 0 and spec["securityContext"]["fsGroup"] != 0
        assert spec["automountServiceAccountToken"] is False
        volumes = {v["name"]: v for v in spec["volumes"]}
        for c in containers(workload):
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"]["drop"] == ["ALL"]
            assert sc["readOnlyRootFilesystem"] is True
            writable = {m["mountPath"] for m in c["volumeMounts"]
                        if "emptyDir" in volumes[m["name"]] and not m.get("readOnly")}
            assert "/tmp" in writable, c["name"]
        for c in containers(workload, init=False):
            ray_start = next(line for line in script(c).splitlines() if "ray start" in line)
            ray_tmp = flags(ray_start)["temp-dir"]
            assert any(m["mountPath"] == ray_tmp and "emptyDir" in volumes[m["name"]]
                       for m in c["volumeMounts"]), c["name"]


def test_recommended_labels_and_selectors(rendered: tuple[str, dict[str, Any], Any]) -> None:
    _, _, out = rendered
    for doc in out.docs:
        labels = doc["metadata"]["labels"]
        for key in ("app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/version",
                    "app.kubernetes.io/managed-by", "helm.sh/chart"):
            assert labels.get(key), (doc["kind"], doc["metadata"]["name"], key)
        assert labels["app.kubernetes.io/instance"] == RELEASE
    pods = {"head": out.head["spec"]["template"]["metadata"]["labels"],
            "decode": out.decode["spec"]["template"]["metadata"]["labels"]}

    def selects(selector: dict[str, str]) -> set[str]:
        return {name for name, labels in pods.items() if selector.items() <= labels.items()}

    for workload, name in ((out.head, "head"), (out.decode, "decode")):
        assert selects(workload["spec"]["selector"]["matchLabels"]) == {name}
    for service in out.of_kind("Service"):
        assert selects(service["spec"]["selector"]) == {"head"}
    for pdb in out.of_kind("PodDisruptionBudget"):
        assert selects(pdb["spec"]["selector"]["matchLabels"]) == {pdb["metadata"]["name"].rsplit("-", 1)[1]}


def test_credentials_from_an_existing_secret() -> None:
    out = render(VALUE_SETS["credentials-secret"])
    for workload in (out.head, out.decode):
        volumes = {v["name"]: v for v in pod_spec(workload)["volumes"]}
        (name,) = [n for n, v in volumes.items() if v.get("secret", {}).get("secretName") == "gcp-key"]
        for c in containers(workload, init=False):
            (mount,) = [m for m in c["volumeMounts"] if m["name"] == name]
            assert mount["readOnly"] is True
            assert env_of(c)["GOOGLE_APPLICATION_CREDENTIALS"]["value"] == f"{mount['mountPath']}/sa.json"
    for c in [*containers(render().head), *containers(render().decode)]:
        assert "GOOGLE_APPLICATION_CREDENTIALS" not in env_of(c)


def test_tls_mounts_the_secret_into_the_head_and_points_the_service_at_it() -> None:
    out = render(VALUE_SETS["mutual-tls"])
    head = container(out.head, "head")
    (volume,) = [v for v in pod_spec(out.head)["volumes"] if v.get("secret", {}).get("secretName") == "loader-tls"]
    (mount,) = [m for m in head["volumeMounts"] if m["name"] == volume["name"]]
    assert mount["readOnly"] is True
    config = ServiceConfig.load(environ=out.config_map)
    assert (config.tls_cert_file, config.tls_key_file, config.tls_client_ca_file) == tuple(
        f"{mount['mountPath']}/{key}" for key in ("tls.crt", "tls.key", "ca.crt"))
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):  # kubelet's gRPC probes lack TLS
        assert set(head[probe]) & {"grpc", "httpGet", "tcpSocket", "exec"} == {"tcpSocket"}, probe
        assert head[probe]["tcpSocket"]["port"] == port_named(head, "grpc")
    decode_has_it = any(v.get("secret", {}).get("secretName") == "loader-tls" for v in pod_spec(out.decode)["volumes"])
    assert decode_has_it  # the batch servers speak TLS too
    server_only = ServiceConfig.load(environ=render({"tls": {"secretName": "loader-tls"}}).config_map)
    assert server_only.tls_cert_file and server_only.tls_client_ca_file is None
    plain = ServiceConfig.load(environ=render().config_map)
    assert (plain.tls_cert_file, plain.tls_key_file, plain.tls_client_ca_file) == (None, None, None)


def test_workload_identity_through_the_service_account() -> None:
    out = render(VALUE_SETS["workload-identity"])
    (account,) = out.of_kind("ServiceAccount")
    assert account["metadata"]["annotations"] == {
        "iam.gke.io/gcp-service-account": "loader@project.iam.gserviceaccount.com"}
    for workload in (out.head, out.decode):
        assert pod_spec(workload)["serviceAccountName"] == account["metadata"]["name"]
    existing = render({"serviceAccount": {"create": False, "name": "existing-sa"}})
    assert existing.of_kind("ServiceAccount") == []
    assert {pod_spec(w)["serviceAccountName"] for w in (existing.head, existing.decode)} == {"existing-sa"}


def test_servicemonitor_scrapes_the_metrics_port() -> None:
    out = render(VALUE_SETS["metrics-and-servicemonitor"])
    (monitor,) = out.of_kind("ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == "metrics" and endpoint["path"] == "/metrics" and endpoint["interval"] == "15s"
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    selector = monitor["spec"]["selector"]["matchLabels"]
    services = [s for s in out.of_kind("Service") if selector.items() <= s["metadata"]["labels"].items()]
    assert [s["metadata"]["name"] for s in services] == [FULLNAME]
    ports = {p["name"]: p for p in services[0]["spec"]["ports"]}
    assert ports["metrics"]["port"] == 9191 and ports["metrics"]["targetPort"] == "metrics"
    head = container(out.head, "head")
    assert port_named(head, "metrics") == 9191
    assert flags(command_line(script(head), "exec shardstream serve"))["metrics-port"] == "9191"
    assert out.config_map["SHARDSTREAM_METRICS_PORT"] == "9191"
    assert render().of_kind("ServiceMonitor") == []


def test_metrics_off_leaves_no_endpoint() -> None:
    out = render(VALUE_SETS["metrics-off"])
    assert out.of_kind("ServiceMonitor") == []
    head = container(out.head, "head")
    assert "metrics-port" not in flags(command_line(script(head), "exec shardstream serve"))
    assert out.config_map["SHARDSTREAM_METRICS_PORT"] == ""
    assert "metrics" not in {p["name"] for p in head["ports"]}
    assert "metrics" not in {p["name"] for p in out.get("Service", FULLNAME)["spec"]["ports"]}


def test_decode_workers_offer_cpus_and_decode_units() -> None:
    for cpus, decoder_cpus, units in ((2, 1.0, 2), (6, 1.5, 4), (7, 2, 3)):
        out = render({"decode": {"cpus": cpus}, "config": {"decoder_cpus": decoder_cpus}})
        ray = flags(command_line(script(container(out.decode, "decode")), "exec ray start"))
        assert ray["num-cpus"] == str(cpus)
        assert json.loads(ray["resources"]) == {"decode": units}
        assert "block" in ray


def test_workers_join_the_heads_gcs_through_its_service() -> None:
    out = render({"ray": {"gcsPort": 7379}})
    head = container(out.head, "head")
    head_ray = flags(command_line(script(head), "ray start --head"))
    assert head_ray["num-cpus"] == "0" and head_ray["port"] == "7379" == str(port_named(head, "gcs"))
    ray_head = out.get("Service", f"{FULLNAME}-ray-head")
    assert ray_head["spec"]["clusterIP"] == "None" and ray_head["spec"]["publishNotReadyAddresses"] is True
    gcs = {p["name"]: p for p in ray_head["spec"]["ports"]}["gcs"]
    assert gcs["targetPort"] == "gcs"
    address = f"{FULLNAME}-ray-head:{gcs['port']}"
    assert flags(command_line(script(container(out.decode, "decode")), "exec ray start"))["address"] == address
    assert f"--address={address}" in script(container(out.decode, "wait-for-head"))
    # `serve --ray-address auto` resolves to this pod's own head through RAY_ADDRESS.
    assert env_of(head)["RAY_ADDRESS"]["value"] == "$(POD_IP):7379"
    assert env_of(head)["POD_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}


def test_ray_token_auth_from_a_secret() -> None:
    out = render({"ray": {"auth": {"existingSecret": "ray-token", "key": "tok"}}})
    for workload in (out.head, out.decode):
        for c in containers(workload):
            env = env_of(c)
            assert env["RAY_AUTH_MODE"]["value"] == "token"
            assert env["RAY_AUTH_TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": "ray-token", "key": "tok"}}
    for c in containers(render().decode):
        assert env_of(c)["RAY_AUTH_MODE"]["value"] == "disabled" and "RAY_AUTH_TOKEN" not in env_of(c)


def test_scheduling_values_reach_only_their_workload() -> None:
    values = VALUE_SETS["everything-set"]
    out = render(values)
    for name, workload in (("head", out.head), ("decode", out.decode)):
        spec, mine = pod_spec(workload), values[name]
        for key in ("nodeSelector", "tolerations", "affinity", "priorityClassName"):
            assert spec.get(key) == mine.get(key), (name, key)
        assert spec["imagePullSecrets"] == [{"name": "regcred"}]
        for c in containers(workload):
            assert c["image"] == "registry.example/ml/shardstream:1.2.3" and c["imagePullPolicy"] == "Always"
    assert container(out.head, "head")["resources"] == default_values()["head"]["resources"]
    assert container(out.decode, "decode")["resources"] == default_values()["decode"]["resources"]


def test_ray_start_params_extend_and_override() -> None:
    out = render(VALUE_SETS["everything-set"])
    head = flags(command_line(script(container(out.head, "head")), "ray start --head"))
    assert head["min-worker-port"] == "11000" and head["max-worker-port"] == "11999"
    assert head["object-store-memory"] == str(4 << 30)
    decode = flags(command_line(script(container(out.decode, "decode")), "exec ray start"))
    assert decode["object-manager-port"] == "8076" and "min-worker-port" not in decode
    overridden = render({"head": {"rayStartParams": {"num-cpus": 1}}})
    assert flags(command_line(script(container(overridden.head, "head")), "ray start --head"))["num-cpus"] == "1"


def test_notes_tell_the_client_address() -> None:
    out = render({"service": {"port": 50052}})
    service = out.get("Service", FULLNAME)
    address = f"{service['metadata']['name']}.{NAMESPACE}.svc:{service['spec']['ports'][0]['port']}"
    assert address == f"{FULLNAME}.{NAMESPACE}.svc:50052"
    assert f'RemoteLoader("{address}"' in out.notes
    assert "decode.replicas=N" in out.notes
    assert "decode.replicas=N" not in render(VALUE_SETS["hpa"]).notes
    assert "tls=" not in out.notes
    tls_notes = render(VALUE_SETS["mutual-tls"]).notes
    assert 'tls=TLS(ca_file="ca.crt", cert_file="client.crt", key_file="client.key")' in tls_notes
    assert f'server_name="{FULLNAME}.{NAMESPACE}.svc"' in tls_notes
    assert "--tls-ca /var/run/secrets/shardstream/tls/ca.crt --tls-cert" in tls_notes


def test_config_changes_roll_the_head_only() -> None:
    base, changed = render(), render({"config": {"decode_timeout_s": 60.0}})
    key = "checksum/config"
    assert base.head["spec"]["template"]["metadata"]["annotations"][key] != \
        changed.head["spec"]["template"]["metadata"]["annotations"][key]
    assert base.decode == changed.decode


def test_the_longest_release_name_gives_valid_names() -> None:
    release = "r" * 53  # Helm's limit
    out = render(name=release)
    for doc in out.docs:
        assert len(doc["metadata"]["name"]) <= 63, doc["metadata"]["name"]
        if (doc["apiVersion"], doc["kind"]) not in CRD_KINDS:
            validate(doc)
    (decode,) = [d for d in out.of_kind("Deployment") if d["metadata"]["name"].endswith("-decode")]
    (ray_head,) = [s for s in out.of_kind("Service") if s["metadata"]["name"].endswith("-ray-head")]
    address = flags(command_line(script(container(decode, "decode")), "exec ray start"))["address"]
    assert address.split(":")[0] == ray_head["metadata"]["name"]


QUANTITY_UNITS = {"": 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40,
                  "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}


def _bytes(quantity: str) -> float:
    number = quantity.rstrip("".join(QUANTITY_UNITS))
    return float(number) * QUANTITY_UNITS[quantity[len(number):]]


def _local_copy(workload: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The decode container's local-copy volume and where it is mounted."""
    volumes = {v["name"]: v for v in pod_spec(workload)["volumes"]}
    (mount,) = [m for m in container(workload, "decode")["volumeMounts"] if m["name"] == "local-copy"]
    assert not mount.get("readOnly")
    return volumes[mount["name"]], mount["mountPath"]


def test_the_local_copy_is_an_emptydir_where_the_service_looks_for_it() -> None:
    out = render()
    volume, mount_path = _local_copy(out.decode)
    local_copy = default_values()["decode"]["localCopy"]
    assert mount_path == local_copy["mountPath"] == "/var/cache/shardstream"
    assert volume == {"name": "local-copy", "emptyDir": {"sizeLimit": local_copy["sizeLimit"]}}
    assert out.config_map["SHARDSTREAM_LOCAL_COPY_DIR"] == mount_path
    config = ServiceConfig.load(environ=out.config_map)
    assert config.local_copy_dir == mount_path and config.local_copy_bytes > 0
    # Kubelet evicts a pod whose emptyDir outgrows its sizeLimit; the copy goes past its bound
    # by the row groups being written before it evicts, so the limit leaves room above it.
    assert _bytes(local_copy["sizeLimit"]) >= 1.05 * config.local_copy_bytes
    # The head runs no decode actors: no local copy there.
    head = pod_spec(out.head)
    assert "local-copy" not in {v["name"] for v in head["volumes"]}
    assert all(m["mountPath"] != mount_path for c in containers(out.head) for m in c["volumeMounts"])
    assert all(m["name"] != "local-copy" for m in container(out.decode, "wait-for-head")["volumeMounts"])

    out = render({"decode": {"localCopy": {"mountPath": "/scratch/copy/", "sizeLimit": "300Gi"}},
                  "config": {"local_copy_bytes": 280 << 30}})
    volume, mount_path = _local_copy(out.decode)
    assert mount_path == out.config_map["SHARDSTREAM_LOCAL_COPY_DIR"] == "/scratch/copy"
    assert volume["emptyDir"] == {"sizeLimit": "300Gi"}
    assert ServiceConfig.load(environ=out.config_map).local_copy_bytes == 280 << 30
    volume, _ = _local_copy(render({"decode": {"localCopy": {"sizeLimit": ""}}}).decode)
    assert volume == {"name": "local-copy", "emptyDir": {}}


@pytest.mark.parametrize("value_set", ["local-copy-hostpath", "local-copy-ephemeral"])
def test_a_local_copy_volume_replaces_the_emptydir(value_set: str) -> None:
    values = VALUE_SETS[value_set]
    out = render(values)
    volume, mount_path = _local_copy(out.decode)
    assert volume == {"name": "local-copy", **values["decode"]["localCopy"]["volume"]}
    assert out.config_map["SHARDSTREAM_LOCAL_COPY_DIR"] == mount_path == values["decode"]["localCopy"].get(
        "mountPath", default_values()["decode"]["localCopy"]["mountPath"])
    validate(out.decode)
    assert "local-copy" not in {v["name"] for v in pod_spec(out.head)["volumes"]}


def test_the_local_copy_values_are_checked() -> None:
    for local_copy in ({"mountPath": "var/cache"}, {"mountPath": "/"}, {"sizeLimit": "lots"},
                       {"volume": {"hostPath": {"path": "/a"}, "emptyDir": {}}},
                       {"volume": {"name": "x"}}, {"volume": {"hostPath": "/a"}}, {"size": "1Ti"}):
        with pytest.raises(helm.HelmValuesError):
            render({"decode": {"localCopy": local_copy}})
    with pytest.raises(helm.HelmValuesError):
        render({"config": {"local_copy_bytes": -1}})
    for taken in ("/tmp", "/dev/shm/", "/scratch/ray"):
        with pytest.raises(helm.HelmError, match=r"decode\.localCopy\.mountPath"):
            render({"decode": {"localCopy": {"mountPath": taken}}, "ray": {"tempDir": "/scratch/ray"}})
    off = ServiceConfig.load(environ=render({"config": {"local_copy_bytes": 0}}).config_map)
    assert off.local_copy_bytes == 0


def test_decode_workers_mount_the_tls_secret_for_their_batch_servers() -> None:
    for secret, mounted in (("shardstream-tls", True), ("", False)):
        decode = render({"tls": {"secretName": secret}}).decode
        pod = decode["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        mounts = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}
        assert ("tls" in volumes) is mounted and ("tls" in mounts) is mounted
        if mounted:
            assert volumes["tls"]["secret"]["secretName"] == "shardstream-tls"
            assert mounts["tls"]["mountPath"] == "/var/run/secrets/shardstream/tls" and mounts["tls"]["readOnly"]
    with pytest.raises(helm.HelmValuesError):  # a removed option is refused, not ignored
        render({"config": {"data_plane": "relay"}})


def test_decode_workers_declare_their_data_ports_and_the_service_binds_them() -> None:
    rendered = render({"decode": {"cpus": 3, "dataPort": 53000}})  # 3 actors x (gRPC + bulk), with spares
    loaded = ServiceConfig.load(environ=rendered.config_map)
    assert loaded.batch_serving.ports == range(53000, 53012)
    ports = {p["name"]: p["containerPort"] for p in rendered.decode["spec"]["template"]["spec"]["containers"][0]["ports"]}
    assert {v for k, v in ports.items() if k.startswith("data-")} == set(range(53000, 53012))
    with pytest.raises(helm.HelmValuesError):
        render({"decode": {"dataPort": 80}})


def test_network_policies_let_clients_reach_the_grpc_and_data_ports_only() -> None:
    assert not render().of_kind("NetworkPolicy")
    clients = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "training"}}}]
    monitoring = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    rendered = render({"networkPolicy": {"enabled": True, "clients": clients, "monitoring": monitoring},
                       "decode": {"dataPort": 53000}})
    release = {"app.kubernetes.io/name": "shardstream", "app.kubernetes.io/instance": RELEASE}
    head = rendered.get("NetworkPolicy", f"{FULLNAME}-head")["spec"]
    decode = rendered.get("NetworkPolicy", f"{FULLNAME}-decode")["spec"]
    assert head["podSelector"]["matchLabels"] == rendered.head["spec"]["selector"]["matchLabels"]
    assert decode["podSelector"]["matchLabels"] == rendered.decode["spec"]["selector"]["matchLabels"]
    for policy in (head, decode):  # Ray among the release's own pods: any port
        assert policy["ingress"][0] == {"from": [{"podSelector": {"matchLabels": release}}]}
    assert head["ingress"][1] == {"from": clients, "ports": [{"port": 50051, "protocol": "TCP"}]}
    assert head["ingress"][2] == {"from": monitoring, "ports": [{"port": 9090, "protocol": "TCP"}]}
    assert decode["ingress"][1] == {"from": clients,
                                    "ports": [{"port": 53000, "endPort": 53007, "protocol": "TCP"}]}
    no_clients = render({"networkPolicy": {"enabled": True}})
    assert len(no_clients.get("NetworkPolicy", f"{FULLNAME}-decode")["spec"]["ingress"]) == 1  # Ray only
