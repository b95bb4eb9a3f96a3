"""Simulated decode nodes on this machine: a ``ray.cluster_utils.Cluster`` whose head has no CPUs
(the service's driver) and whose other nodes each hold one decode actor."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence

import ray
from ray.cluster_utils import Cluster

NODE_STORE = 80 * 2**20  # each node's object store
# A simulated node starting while the suite keeps both cores busy can miss Ray's heartbeats for
# longer than its default allowance (5 checks, 15-25 s) and be declared dead, which tests nothing of
# ours: allow about two minutes.
SYSTEM_CONFIG = {"health_check_failure_threshold": 40}


def new_cluster() -> Cluster:
    return Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "object_store_memory": NODE_STORE,
                                                         "_system_config": SYSTEM_CONFIG})


def add_decode_node(cluster: Cluster, env: dict[str, str] | None = None) -> object:
    """A node with one CPU and one `decode` unit (`env`: its raylet's, and so its actors',
    environment); its handle, for `cluster.remove_node`."""
    return cluster.add_node(num_cpus=1, resources={"decode": 1}, object_store_memory=NODE_STORE,
                            **({"env_vars": env} if env else {}))


@contextlib.contextmanager
def decode_cluster(node_envs: Sequence[dict[str, str] | None] = (None, None)) -> Iterator[Cluster]:
    """A cluster with one decode node per entry of `node_envs`, this process connected to it."""
    cluster = new_cluster()
    try:
        for env in node_envs:
            add_decode_node(cluster, env)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, logging_level="WARNING",
                 runtime_env={"env_vars": {"PYTHONPATH": os.getcwd()}})
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


__all__ = ["NODE_STORE", "add_decode_node", "decode_cluster", "new_cluster"]
