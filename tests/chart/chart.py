"""The chart rendered offline by the real Helm engine (helm-python-sdk), and ways to read it."""

from __future__ import annotations

import copy
import functools
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART_DIR = ROOT / "helm" / "shardstream"
# The newest Kubernetes whose schemas kubernetes-validate ships with this pin; the chart's
# Chart.yaml asks for >= 1.25 and uses nothing newer than autoscaling/v2 and policy/v1.
KUBE_VERSION = "1.33.0"
RELEASE = "demo"
NAMESPACE = "ml"
FULLNAME = "demo-shardstream"
# Kinds whose schema is a CRD's, which kubernetes-validate does not ship.
CRD_KINDS = {("monitoring.coreos.com/v1", "ServiceMonitor")}


@dataclass
class Render:
    files: dict[str, str]
    docs: list[dict[str, Any]]

    @property
    def notes(self) -> str:
        return self.files.get("shardstream/templates/NOTES.txt", "")

    def keys(self) -> set[tuple[str, str]]:
        return {(d["kind"], d["metadata"]["name"]) for d in self.docs}

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [d for d in self.docs if d["kind"] == kind]

    def get(self, kind: str, name: str) -> dict[str, Any]:
        found = [d for d in self.docs if d["kind"] == kind and d["metadata"]["name"] == name]
        assert len(found) == 1, f"{kind}/{name}: found {len(found)} in {sorted(self.keys())}"
        return found[0]

    @property
    def head(self) -> dict[str, Any]:
        return self.get("Deployment", f"{FULLNAME}-head")

    @property
    def decode(self) -> dict[str, Any]:
        return self.get("Deployment", f"{FULLNAME}-decode")

    @property
    def config_map(self) -> dict[str, str]:
        data: dict[str, str] = self.get("ConfigMap", f"{FULLNAME}-config")["data"]
        return data


@functools.cache
def _chart() -> helm.Chart:
    return helm.Chart.load(str(CHART_DIR))


def render(values: dict[str, Any] | None = None, name: str = RELEASE,
           namespace: str = NAMESPACE) -> Render:
    files = _chart().render(copy.deepcopy(values or {}), name=name, namespace=namespace)
    docs = [doc for path, text in sorted(files.items()) if path.endswith(".yaml")
            for doc in yaml.safe_load_all(text) if doc]
    return Render(files=files, docs=docs)


def lint(values: dict[str, Any] | None = None) -> dict[str, Any]:
    report: dict[str, Any] = helm.lint(str(CHART_DIR), copy.deepcopy(values or {}), strict=True,
                                       namespace=NAMESPACE, kube_version=f"v{KUBE_VERSION}")
    return report


def validate(doc: dict[str, Any]) -> None:
    """Strict validation against the Kubernetes schemas; raises on any unknown or wrong field."""
    kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)


def default_values() -> dict[str, Any]:
    """values.yaml as written (Helm drops null entries when it merges; this keeps them)."""
    values: dict[str, Any] = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    return values


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = workload["spec"]["template"]["spec"]
    return spec


def containers(workload: dict[str, Any], init: bool = True) -> Iterator[dict[str, Any]]:
    spec = pod_spec(workload)
    yield from spec["containers"]
    if init:
        yield from spec.get("initContainers", [])


def container(workload: dict[str, Any], name: str) -> dict[str, Any]:
    spec = pod_spec(workload)
    found = [c for c in spec["containers"] + spec.get("initContainers", []) if c["name"] == name]
    assert len(found) == 1, f"container {name}: found {len(found)}"
    return found[0]


def port_named(c: dict[str, Any], name: str) -> int:
    ports = [p["containerPort"] for p in c.get("ports", []) if p["name"] == name]
    assert len(ports) == 1, f"container {c['name']} has {len(ports)} ports named {name}"
    return int(ports[0])


def env_of(c: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in c.get("env", [])}


def script(c: dict[str, Any]) -> str:
    """The shell script a container runs (`/bin/sh -c SCRIPT`)."""
    assert c["command"] == ["/bin/sh", "-c"], c["command"]
    assert len(c["args"]) == 1
    text: str = c["args"][0]
    return text


def flags(line: str) -> dict[str, str]:
    """--flag=value, --flag value and bare --flag words of one command line, unquoted."""
    words = shlex.split(line)
    out: dict[str, str] = {}
    for i, word in enumerate(words):
        if not word.startswith("--"):
            continue
        key, eq, value = word[2:].partition("=")
        if not eq and i + 1 < len(words) and not words[i + 1].startswith("--"):
            value = words[i + 1]  # --flag value
        assert key not in out, f"--{key} given twice in {line!r}"
        out[key] = value
    return out


def command_line(text: str, prefix: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip().startswith(prefix)]
    assert len(lines) == 1, f"{len(lines)} lines start with {prefix!r} in:\n{text}"
    return lines[0]
