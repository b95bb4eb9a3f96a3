"""The consumer side of each system: ``loader_factory(spec)`` builds what the consumer iterates.

Each module is imported only by the consumer that needs it, so a DataLoader
consumer never imports Ray or TensorFlow (their memory would skew its RSS).
"""

from __future__ import annotations

import importlib

from bench.meter import LoaderFactory
from bench.spec import ConsumerSpec

_MODULES = {
    "shardstream": "bench.systems.remote",
    "dataloader": "bench.systems.dataloader",
    "raydata": "bench.systems.raydata",
    "tfdata": "bench.systems.tfdata",
    "spdl": "bench.systems.spdl_pipeline",
    "grpc_raw": "bench.transport.raw_grpc",
    "tcp_raw": "bench.transport.raw_tcp",
}


def loader_factory(spec: ConsumerSpec) -> LoaderFactory:
    module = importlib.import_module(_MODULES[spec.system])
    factory: LoaderFactory = module.loader_factory(spec)
    return factory


__all__ = ["loader_factory"]
