"""A connection reset mid-epoch: the rank continues at its next batch, nothing lost or repeated.

A proxy sits in front of the service and, on the direct data plane, one in front of every decoder
(the rank's fetcher is pointed at them); a reset cuts every connection of the rank at once.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from shardstream.client import RemoteLoader, channels
from shardstream.client.tls import open_channel
from shardstream.service.control.server import Service
from tests.datasets import oracle_batches, write_indexed
from tests.proxy import ResettingProxy

N = 90


class Proxies:
    """A proxy in front of the service and of each of its decoders."""

    def __init__(self, running: Service, address: str, connect_delay_s: float = 0.0) -> None:
        self.service = _proxy(address)
        self.decoders = {a: _proxy(a, connect_delay_s) for a in running.pool.batch_addresses()}

    @property
    def all(self) -> list[ResettingProxy]:
        return [self.service, *self.decoders.values()]

    def reset_all(self) -> None:
        for proxy in self.all:
            proxy.reset_all()


def _proxy(address: str, connect_delay_s: float = 0.0) -> ResettingProxy:
    host, port = address.rsplit(":", 1)
    return ResettingProxy(host, int(port), connect_delay_s)


@pytest.fixture
def proxies(request: pytest.FixtureRequest, service: tuple[Service, str],
            monkeypatch: pytest.MonkeyPatch) -> Iterator[Proxies]:
    running, address = service
    proxies = Proxies(running, address, getattr(request, "param", 0.0))
    via = {a: p.address for a, p in proxies.decoders.items()}
    monkeypatch.setattr(channels, "open_channel", lambda a, tls, options: open_channel(via.get(a, a), tls, options))
    yield proxies
    for proxy in proxies.all:
        proxy.close()


@pytest.mark.parametrize("reset_at", [0, 5, 21])
def test_connection_reset_mid_epoch(proxies: Proxies, tmp_path: object, reset_at: int) -> None:
    data = f"{tmp_path}/data"
    write_indexed(data, [40, 50])
    got = []
    with RemoteLoader(proxies.service.address, dataset=data, batch_size=2, seed=8, world_size=2, rank=1,
                      prefetch=3, reconnect_timeout=30) as loader:
        loader.set_epoch(2)
        for step, batch in enumerate(loader):
            got.append(batch["idx"].tolist())
            if step == reset_at:
                proxies.reset_all()
        direct = bool(loader.job.batch_servers)
        lost = loader.stats.decoders_lost
    assert proxies.service.resets == 1
    assert got == oracle_batches(N, 2, 1, 2, True, 8, False, 2)
    if direct:  # the reset cut the rank's decoder streams (all of them, so it reopened the job) ...
        assert all(p.resets == 1 for p in proxies.decoders.values())
        if reset_at + 3 < len(got):  # ... while it still had steps to fetch (prefetch=3)
            assert lost == len(proxies.decoders)


def test_a_rank_keeps_one_connection_per_decoder_across_epochs(proxies: Proxies, tmp_path: object) -> None:
    data = f"{tmp_path}/data"
    write_indexed(data, [40, 50])
    with RemoteLoader(proxies.service.address, dataset=data, batch_size=2, seed=8, world_size=2, rank=0,
                      prefetch=3) as loader:
        for epoch in range(3):
            loader.set_epoch(epoch)
            assert [b["idx"].tolist() for b in loader] == oracle_batches(N, 2, 0, 2, True, 8, False, epoch)
        assert loader.job.batch_servers
    assert [p.accepted for p in proxies.decoders.values()] == [1] * len(proxies.decoders)


@pytest.mark.parametrize("proxies", [0.6], indirect=True)
def test_a_decoder_that_answers_a_connection_late_still_serves(proxies: Proxies, tmp_path: object) -> None:
    """A decoder whose HTTP/2 SETTINGS come 0.6 s after the TCP connection (a loaded host, a long link)
    is not given up: its first connection attempt has time to finish."""
    data = f"{tmp_path}/data"
    write_indexed(data, [40, 50])
    with RemoteLoader(proxies.service.address, dataset=data, batch_size=2, seed=8, world_size=2, rank=1,
                      prefetch=3) as loader:
        assert [b["idx"].tolist() for b in loader] == oracle_batches(N, 2, 1, 2, True, 8, False, 0)
        assert loader.job.batch_servers
        lost = loader.stats.decoders_lost
    assert lost == 0
    assert [p.accepted for p in proxies.decoders.values()] == [1] * len(proxies.decoders)


def test_reconnect_gives_up_with_a_typed_error(proxies: Proxies, tmp_path: object) -> None:
    from shardstream.client import ServiceUnavailable

    data = f"{tmp_path}/data"
    write_indexed(data, [30])
    with RemoteLoader(proxies.service.address, dataset=data, batch_size=2, world_size=1, rank=0, prefetch=2,
                      reconnect_timeout=2) as loader:
        batches = iter(loader)
        next(batches)
        for proxy in proxies.all:  # the service and its decoders are gone for good, as far as it can tell
            proxy.close()
        with pytest.raises(ServiceUnavailable, match="could not reconnect within 2 s"):
            for _ in batches:
                pass
