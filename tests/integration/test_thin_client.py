"""The training side installs the client only: the wheel's requirements, and a RemoteLoader (and
`shardstream status`) running from that wheel where the service's packages cannot be imported."""

from __future__ import annotations

import email
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.datasets import oracle_batches, write_indexed

ROOT = Path(__file__).resolve().parents[2]
CLIENT_REQUIREMENTS = {"grpcio", "protobuf", "numpy", "torch"}
SERVICE_ONLY = ("ray", "pyarrow", "fsspec", "gcsfs", "s3fs", "PIL", "tqdm", "prometheus_client",
                "grpc_health")

# Run first in the child: the checkout's own source roots leave sys.path (the wheel's copy is
# used), and importing any service-only package fails as if it were not installed.
BLOCK = f"""
import sys
root = {str(ROOT)!r}
sources = {{root, root + "/client", root + "/service", root + "/proto", ""}}
sys.path[:] = [p for p in sys.path if p.rstrip("/") not in sources]
sys.path.insert(0, sys.argv.pop(1))
service_only = {SERVICE_ONLY!r}
class Blocked:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name.split(".")[0] in service_only:
            raise ModuleNotFoundError(f"No module named {{name!r}} (a client-only install)", name=name)
        return None
sys.meta_path.insert(0, Blocked)
"""

LOADER = BLOCK + """
import json
import shardstream.client
from shardstream.client import RemoteLoader
loader = RemoteLoader(sys.argv[1], dataset=sys.argv[2], batch_size=4, shuffle=True, seed=3, world_size=2,
                      rank=1, job_name="thin-client")
batches = [b["idx"].tolist() for b in loader]
loader.close()
print(json.dumps({"client": shardstream.client.__file__, "batches": batches,
                  "loaded": sorted(m for m in sys.modules if m.split(".")[0] in service_only)}))
"""

STATUS = BLOCK + """
from shardstream.service.cli import main
sys.exit(main(["status", sys.argv[1]]))
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(out), str(ROOT)], check=True, capture_output=True, timeout=300)
    (built,) = out.glob("shardstream-*.whl")
    return built


@pytest.fixture(scope="module")
def unpacked(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("site")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(target)
    return target


def _requirements(wheel: Path) -> tuple[set[str], dict[str, set[str]]]:
    """The wheel's plain requirements, and those of each extra, by distribution name."""
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = email.message_from_bytes(archive.read(name))
    plain: set[str] = set()
    extras: dict[str, set[str]] = {}
    for requirement in metadata.get_all("Requires-Dist") or []:
        spec, _, marker = requirement.partition(";")
        dist = spec.split("[")[0].split(">")[0].split("<")[0].split("=")[0].strip()
        if "extra ==" in marker:
            extras.setdefault(marker.split("extra ==")[1].strip().strip("'\""), set()).add(dist)
        else:
            plain.add(dist)
    return plain, extras


def test_the_wheel_requires_the_client_stack_only(wheel: Path) -> None:
    plain, extras = _requirements(wheel)
    assert plain == CLIENT_REQUIREMENTS
    assert {"ray", "pyarrow", "fsspec", "gcsfs", "pillow"} <= extras["service"]
    assert {"s3fs", "ray"} <= extras["s3"]  # s3 brings the service along
    with zipfile.ZipFile(wheel) as archive:
        assert not [n for n in archive.namelist() if n.startswith(("bench/", "tests/"))]


def test_a_loader_runs_where_the_service_packages_cannot_be_imported(
        unpacked: Path, service_address: str, tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    write_indexed(data, [9, 6])
    result = subprocess.run([sys.executable, "-c", LOADER, str(unpacked), service_address, data],
                            capture_output=True, text=True, timeout=120, cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": ""})
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["client"].startswith(str(unpacked))  # the wheel's code, not the checkout's
    assert report["batches"] == oracle_batches(15, 2, 1, 4, True, 3, False, 0)
    assert report["loaded"] == []


def test_status_runs_where_the_service_packages_cannot_be_imported(unpacked: Path,
                                                                   service_address: str) -> None:
    result = subprocess.run([sys.executable, "-c", STATUS, str(unpacked), service_address],
                            capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": ""})
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"service {service_address}" in result.stdout


def test_serve_without_the_service_packages_says_what_to_install(unpacked: Path) -> None:
    script = BLOCK + "from shardstream.service.cli import main\nsys.exit(main(['serve', '--port', '0']))\n"
    result = subprocess.run([sys.executable, "-c", script, str(unpacked)], capture_output=True, text=True,
                            timeout=120, env={**os.environ, "PYTHONPATH": ""})
    assert result.returncode == 2
    assert "pip install 'shardstream[service]'" in result.stderr
