"""Joining a Ray cluster, or starting an embedded local one (laptop, tests, demo)."""

from __future__ import annotations

import logging
import os

import ray

from shardstream.service.config import ServiceConfig
from shardstream.service.control.pool import DECODE_RESOURCE

log = logging.getLogger(__name__)


def connect_ray(config: ServiceConfig) -> None:
    """ray.init against config.ray_address, or a local Ray with a `decode` resource."""
    if ray.is_initialized():
        return
    if config.ray_address:
        log.info("joining the Ray cluster at %s", config.ray_address)
        ray.init(address=config.ray_address, logging_level=logging.WARNING)
        return
    cpus = os.cpu_count() or 1
    decoders = config.num_decoders or cpus
    log.info("starting an embedded local Ray: %d CPU(s), %d decoder(s)", cpus, decoders)
    ray.init(
        address="local",  # always a new local Ray, never one that `ray start` left on the machine
        num_cpus=max(cpus, int(decoders * config.decoder_cpus + 0.999)),
        resources={DECODE_RESOURCE: decoders},
        object_store_memory=config.object_store_memory,
        include_dashboard=False,
        logging_level=logging.WARNING,
    )


__all__ = ["connect_ray"]
