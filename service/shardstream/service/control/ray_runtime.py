"""Joining a Ray cluster, or starting an embedded local one (laptop, tests, demo).

Joining picks RAY_AUTH_MODE from the cluster itself (control/ray_auth.py), so
`serve --ray-address HOST:PORT` joins a `ray start` cluster with token
authentication on or off; a join that fails is one line that says what to set.
"""

from __future__ import annotations

import logging
import os

import ray

from shardstream.service.config import ServiceConfig
from shardstream.service.control.pool import DECODE_RESOURCE
from shardstream.service.control.ray_auth import (
    RayJoinError,
    auth_token_source,
    choose_auth_mode,
    join_failure,
)

log = logging.getLogger(__name__)


def connect_ray(config: ServiceConfig) -> None:
    """ray.init against config.ray_address, or a local Ray with a `decode` resource."""
    if ray.is_initialized():
        return
    if config.ray_address:
        join_ray(config.ray_address)
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


def join_ray(address: str) -> None:
    mode = choose_auth_mode(address)
    if os.environ.get("RAY_AUTH_MODE") != mode:
        os.environ["RAY_AUTH_MODE"] = mode
        _reload_ray_config()
    log.info("joining the Ray cluster at %s (RAY_AUTH_MODE=%s)", address, mode)
    try:
        ray.init(address=address, logging_level=logging.WARNING)
    except ConnectionError as exc:
        raise RayJoinError(join_failure(address, mode, auth_token_source(), exc)) from None


def _reload_ray_config() -> None:
    """Make this process's Ray see the RAY_AUTH_MODE just set: Ray reads its config from the
    environment once, and `ray` is imported already (Ray's own `ray start` does the same)."""
    try:
        from ray._raylet import Config  # type: ignore[attr-defined]
    except ImportError:  # a Ray without token authentication: nothing to reload
        return
    Config.initialize("")


__all__ = ["connect_ray", "join_ray"]
