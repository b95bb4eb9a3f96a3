"""deploy/: the example torchrun Job and the image agree with the chart and the repository."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.chart.chart import ROOT, default_values, flags, pod_spec, render, validate

DEPLOY = ROOT / "deploy"
# The release the Job's comments install: `helm install shardstream helm/shardstream -n shardstream`.
JOB_RELEASE = JOB_NAMESPACE = "shardstream"


def _job() -> dict[str, Any]:
    (job,) = [d for d in yaml.safe_load_all((DEPLOY / "job-torchrun.yaml").read_text()) if d]
    return job


def _dockerfile() -> list[str]:
    """Instructions of deploy/Dockerfile, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n\s*", " ", (DEPLOY / "Dockerfile").read_text())
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_the_job_validates_strictly() -> None:
    job = _job()
    assert (job["apiVersion"], job["kind"]) == ("batch/v1", "Job")
    validate(job)


def test_the_job_runs_torchrun_against_the_charts_service() -> None:
    chart = render(name=JOB_RELEASE, namespace=JOB_NAMESPACE)
    (service,) = [s for s in chart.of_kind("Service") if "clusterIP" not in s["spec"]]
    grpc = {p["name"]: p["port"] for p in service["spec"]["ports"]}["grpc"]
    spec = pod_spec(_job())
    (trainer,) = spec["containers"]
    command = trainer["command"] + trainer["args"]
    assert command[0] == "torchrun" and "nproc-per-node" in flags(" ".join(command))
    assert flags(" ".join(command))["address"] == f"{service['metadata']['name']}.{JOB_NAMESPACE}.svc:{grpc}"
    (account,) = chart.of_kind("ServiceAccount")
    assert spec["serviceAccountName"] == account["metadata"]["name"]
    assert spec["securityContext"]["runAsNonRoot"] is True
    volumes = {v["name"]: v for v in spec["volumes"]}
    (shm,) = [m for m in trainer["volumeMounts"] if m["mountPath"] == "/dev/shm"]
    assert volumes[shm["name"]]["emptyDir"]["medium"] == "Memory"


def test_the_jobs_script_is_in_the_image_and_takes_its_arguments() -> None:
    (trainer,) = pod_spec(_job())["containers"]
    script = next(word for word in trainer["command"] if word.endswith(".py"))
    instructions = _dockerfile()
    workdir = [i.split()[1] for i in instructions if i.startswith("WORKDIR ")]
    assert workdir == ["/opt/shardstream"]
    assert "COPY examples/ examples/" in instructions
    local = ROOT / Path(script).relative_to(workdir[0])
    assert local.is_file(), local
    spec = importlib.util.spec_from_file_location("train_digits_for_test", local)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    try:
        spec.loader.exec_module(module)
        args = module.parse_args(trainer["args"])
    finally:
        del sys.modules[spec.name]
    assert args.address.endswith(":50051") and args.data.startswith("gs://")


def test_the_image_is_non_root_and_carries_what_the_chart_runs() -> None:
    instructions = _dockerfile()
    assert instructions[0] == "FROM python:3.11-slim"
    (user,) = [i.split()[1] for i in instructions if i.startswith("USER ")]
    uid, _, gid = user.partition(":")
    security = default_values()["podSecurityContext"]
    assert (int(uid), int(gid)) == (security["runAsUser"], security["runAsGroup"]) and int(uid) != 0
    runs = [i for i in instructions if i.startswith("RUN ")]
    torch = next(i for i in runs if "torch==" in i)
    assert "--index-url" in torch and "download.pytorch.org/whl/cpu" in " ".join(instructions)
    assert any('pip install ".[service,s3]"' in i for i in runs)  # the service, able to read s3://
    # Ports the chart uses by default are documented as exposed.
    (expose,) = [set(map(int, i.split()[1:])) for i in instructions if i.startswith("EXPOSE ")]
    values = default_values()
    assert {values["service"]["port"], values["metrics"]["port"], values["ray"]["gcsPort"],
            values["ray"]["clientServerPort"], values["ray"]["nodeManagerPort"]} <= expose
    # The build context the image copies from exists.
    for copy in (i for i in instructions if i.startswith("COPY ")):
        for source in copy.split()[1:-1]:
            assert (ROOT / source).exists(), source
