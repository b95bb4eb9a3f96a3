"""A connection reset mid-epoch: the rank continues at its next batch, nothing lost or repeated."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from shardstream.client import RemoteLoader
from tests.datasets import oracle_batches, write_indexed
from tests.proxy import ResettingProxy

N = 90


@pytest.fixture
def proxy(service_address: str) -> Iterator[ResettingProxy]:
    host, port = service_address.rsplit(":", 1)
    proxy = ResettingProxy(host, int(port))
    yield proxy
    proxy.close()


@pytest.mark.parametrize("reset_at", [0, 5, 21])
def test_connection_reset_mid_epoch(proxy: ResettingProxy, tmp_path: object, reset_at: int) -> None:
    data = f"{tmp_path}/data"
    write_indexed(data, [40, 50])
    got = []
    with RemoteLoader(proxy.address, dataset=data, batch_size=2, seed=8, world_size=2, rank=1, prefetch=3,
                      reconnect_timeout=30) as loader:
        loader.set_epoch(2)
        for step, batch in enumerate(loader):
            got.append(batch["idx"].tolist())
            if step == reset_at:
                proxy.reset_all()
    assert proxy.resets == 1
    assert got == oracle_batches(N, 2, 1, 2, True, 8, False, 2)


def test_reconnect_gives_up_with_a_typed_error(service_address: str, tmp_path: object) -> None:
    from shardstream.client import ServiceUnavailable

    host, port = service_address.rsplit(":", 1)
    proxy = ResettingProxy(host, int(port))
    data = f"{tmp_path}/data"
    write_indexed(data, [30])
    with RemoteLoader(proxy.address, dataset=data, batch_size=2, world_size=1, rank=0, prefetch=2,
                      reconnect_timeout=2) as loader:
        batches = iter(loader)
        next(batches)
        proxy.close()  # the service is gone for good, as far as this client can tell
        with pytest.raises(ServiceUnavailable, match="could not reconnect within 2 s"):
            for _ in batches:
                pass
