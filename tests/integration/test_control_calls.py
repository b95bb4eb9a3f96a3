"""The control calls on a real service, one job each: a rank joins with OpenJob then ListDecoders,
refreshes its decoders with ListDecoders alone, and reads the manifest with GetManifest; a job the
service has forgotten is joined again; a client of the previous protocol version is refused with
ProtocolMismatch naming both versions, whichever call it makes."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from shardstream.client import ProtocolMismatch, RemoteLoader, connection, fetcher, loader
from shardstream.proto import PROTOCOL_VERSION
from shardstream.service.control.server import Service
from tests.datasets import oracle_batches, write_indexed

N = 40
SLOW = {"transform": "tests.transforms:slow", "transform_args": {"delay_s": 0.05}}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> str:
    directory = str(tmp_path_factory.mktemp("control"))
    write_indexed(directory, [25, 15])
    return directory


def counted(calls: dict[str, int], name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        calls[name] = calls.get(name, 0) + 1
        return method(*args, **kwargs)

    return call


def spy(it: RemoteLoader) -> dict[str, int]:
    """How often the loader's connection makes each control call from now on."""
    calls: dict[str, int] = {}
    for name in ("open_job", "list_decoders", "get_manifest"):
        setattr(it._connection, name, counted(calls, name, getattr(it._connection, name)))
    return calls


def test_a_rank_refreshes_its_decoders_with_list_decoders_alone(service: tuple[Service, str], dataset: str,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    running, address = service
    monkeypatch.setattr(fetcher, "DECODERS_REFRESH_S", 0.2)
    with RemoteLoader(address, dataset=dataset, batch_size=4, seed=1, world_size=1, rank=0, job_name="refreshed",
                      prefetch=2, **SLOW) as it:  # type: ignore[arg-type]
        assert sorted(it.job.batch_servers) == sorted(running.pool.batch_addresses())
        joined = it.job
        calls = spy(it)
        assert [b["idx"].tolist() for b in it] == oracle_batches(N, 1, 0, 4, True, 1, False, 0)
        assert calls.get("list_decoders", 0) >= 2, calls  # the epoch takes ~0.5 s: refreshed on the way
        assert "open_job" not in calls  # the job stays open: nothing reads or registers it again
        assert it.job is not joined and it.job.job_id == joined.job_id  # a new snapshot, the same job
        assert sorted(it.job.batch_servers) == sorted(running.pool.batch_addresses())


def test_the_manifest_comes_from_get_manifest(service: tuple[Service, str], dataset: str) -> None:
    running, address = service
    with RemoteLoader(address, dataset=dataset, batch_size=4, world_size=2, rank=1, job_name="manifest") as it:
        calls = spy(it)
        manifest = it.manifest()
        assert manifest == running.registry.get(it.job.job_id).manifest
        assert it.state_dict()["manifest"] == manifest and calls == {"get_manifest": 1}  # asked once, then kept
        assert json.dumps(manifest)


def test_a_job_the_service_forgot_is_joined_again(service: tuple[Service, str], dataset: str) -> None:
    """The job sat idle past the service's job_idle_ttl_s (or the service restarted): a refresh or
    the manifest joins it again, as the same job, before asking."""
    running, address = service
    with RemoteLoader(address, dataset=dataset, batch_size=4, seed=2, world_size=1, rank=0,
                      job_name="forgotten") as it:
        job_id = it.job.job_id
        for forgotten in running.registry.expire(0.0):
            running.pool.forget(forgotten.job_id)
        calls = spy(it)
        assert sorted(it._list_decoders()) == sorted(running.pool.batch_addresses())
        assert calls == {"list_decoders": 2, "open_job": 1} and it.job.job_id == job_id
        for forgotten in running.registry.expire(0.0):
            running.pool.forget(forgotten.job_id)
        assert it.manifest()["dataset"]["samples"] == N
        assert [b["idx"].tolist() for b in it] == oracle_batches(N, 1, 0, 4, True, 2, False, 0)


def test_a_client_of_the_previous_protocol_version_is_refused_naming_both(service: tuple[Service, str],
                                                                          dataset: str,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    _, address = service
    old = PROTOCOL_VERSION - 1
    named = f"client speaks protocol version {old}, this service speaks {PROTOCOL_VERSION}"
    with RemoteLoader(address, dataset=dataset, batch_size=4, world_size=1, rank=0, job_name="versions") as it:
        monkeypatch.setattr(connection, "PROTOCOL_VERSION", old)
        with pytest.raises(ProtocolMismatch, match=named):
            it._connection.list_decoders(it.job.job_id, 10)
        with pytest.raises(ProtocolMismatch, match=named):
            it.manifest()
    monkeypatch.setattr(loader, "PROTOCOL_VERSION", old)
    with pytest.raises(ProtocolMismatch, match=named) as refused:
        RemoteLoader(address, dataset=dataset, batch_size=4, world_size=1, rank=0, job_name="versions")
    assert refused.value.from_service
