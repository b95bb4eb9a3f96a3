"""No hangs: every wait has a deadline and ends in a typed error that names the cause."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from shardstream.client import DeadlineExceeded, RemoteLoader
from shardstream.service.config import ServiceConfig
from shardstream.service.control.server import Service, create_server
from tests.datasets import oracle_batches, write_indexed


@pytest.fixture(scope="module")
def strict_service(local_ray: None) -> Iterator[tuple[Service, str]]:
    """A second service on the same Ray with short deadlines and a short job memory."""
    running, port = create_server(ServiceConfig(port=0, num_decoders=1, decoder_cpus=0.25, decode_timeout_s=1.5,
                                                job_idle_ttl_s=1.0, allowed_transform_modules=("tests.transforms",)))
    yield running, f"127.0.0.1:{port}"
    running.stop(grace=1.0)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> str:
    directory = str(tmp_path_factory.mktemp("hangs"))
    write_indexed(directory, [12])
    return directory


def test_stuck_decode_is_a_deadline_error_naming_the_batch(strict_service: tuple[Service, str],
                                                           dataset: str) -> None:
    _, address = strict_service
    started = time.monotonic()
    with RemoteLoader(address, dataset=dataset, batch_size=2, world_size=1, rank=0, prefetch=1,
                      transform="tests.transforms:slow", transform_args={"delay_s": 2.0}) as loader, \
            pytest.raises(DeadlineExceeded, match=r"decoding batch 0 of job \w+ \(epoch 0, rank 0\)"):
        next(iter(loader))
    assert time.monotonic() - started < 30


def test_client_deadline_when_no_batch_arrives(service_address: str, dataset: str) -> None:
    started = time.monotonic()
    with RemoteLoader(service_address, dataset=dataset, batch_size=2, world_size=1, rank=0, prefetch=1,
                      timeout=1.0, transform="tests.transforms:slow", transform_args={"delay_s": 3.0}) as loader, \
            pytest.raises(DeadlineExceeded, match=r"no batch for job .* within 1 s"):
        next(iter(loader))
    assert time.monotonic() - started < 30


def test_idle_jobs_are_forgotten_and_reopened_on_demand(strict_service: tuple[Service, str],
                                                        dataset: str) -> None:
    running, address = strict_service
    with RemoteLoader(address, dataset=dataset, batch_size=5, world_size=1, rank=0, job_name="idle") as loader:
        first = [b["idx"].tolist() for b in loader]
        deadline = time.monotonic() + 30
        while any(job.name == "idle" for job in running.registry.all()) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(job.name == "idle" for job in running.registry.all())  # bounded service memory
        second = [b["idx"].tolist() for b in loader]  # JobNotFound -> the client opens it again
    assert first == oracle_batches(12, 1, 0, 5, True, 0, False, 0)
    assert second == oracle_batches(12, 1, 0, 5, True, 0, False, 1)


# The hang this guards against (gRPC's cleanup at interpreter shutdown waiting for a lock a stopped
# daemon thread held; client/shutdown.py) struck about one exit in three. Ten exits catch a
# regression of that rate with probability 1 - (2/3)**10 = 98.3% (four caught 80%). Each costs a
# fresh interpreter, 2-4.5 s here: ten take about 24 s, 13 s more than four did.
EXIT_REPETITIONS = 10
ABANDONING_SCRIPT = (
    "import sys\n"
    "from shardstream.client import RemoteLoader\n"
    "loader = RemoteLoader(sys.argv[1], dataset=sys.argv[2], batch_size=1, world_size=1, rank=0, prefetch=2)\n"
    "it = iter(loader)\n"
    "next(it)\n"
    "print('left mid-epoch without close()')\n"
)


@pytest.mark.parametrize("repetition", range(EXIT_REPETITIONS))
def test_an_abandoned_loader_does_not_keep_its_process_alive(service_address: str, dataset: str,
                                                              repetition: int) -> None:
    started = time.monotonic()
    try:
        result = subprocess.run([sys.executable, "-c", ABANDONING_SCRIPT, service_address, dataset],
                                capture_output=True, text=True, timeout=30, env={**os.environ})
    except subprocess.TimeoutExpired as exc:
        printed = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout
        raise AssertionError(f"exit {repetition}: the process was still alive after 30 s (it printed "
                             f"{printed!r})") from None
    assert result.returncode == 0, result.stderr[-2000:]
    assert "left mid-epoch" in result.stdout
    assert time.monotonic() - started < 30
