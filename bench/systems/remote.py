"""shardstream: RemoteLoader against a running service (started by the harness, not here).

The client library is imported with this module, before the clock of
``measure`` starts, as every system's library is: time to first batch is
connecting, opening the job and streaming, not Python imports.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

from bench.meter import Batch, LoaderFactory
from bench.spec import ConsumerSpec
from bench.systems.epochs import over_epochs
from shardstream.client import TLS, RemoteLoader


def loader_factory(spec: ConsumerSpec) -> LoaderFactory:
    @contextlib.contextmanager
    def open_loader() -> Iterator[Iterable[Batch]]:
        loader = RemoteLoader(
            spec.address, dataset=spec.dataset, batch_size=spec.batch_size, shuffle=spec.shuffle, seed=0,
            transform="image" if spec.transform else None,
            transform_args={"size": spec.crop} if spec.transform else None,
            columns=spec.columns, rank=0, world_size=1, prefetch=spec.prefetch,
            job_name=spec.job_name or None, tls=TLS(ca_file=spec.tls_ca) if spec.tls_ca else None,
            shared_memory=spec.shared_memory, bulk_socket=spec.bulk_socket,
        )

        def epoch(e: int) -> Iterable[Batch]:
            loader.set_epoch(e)
            return loader

        try:
            yield over_epochs(epoch, spec.epochs)
        finally:
            loader.close()

    return open_loader


__all__ = ["loader_factory"]
