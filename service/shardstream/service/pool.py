"""The decode pool: decode actors on the cluster's `decode` resource, least-loaded dispatch.

Actors restart when they die (``max_restarts=-1``) and Ray retries their
in-flight tasks (``max_task_retries=-1``): decoding is pure, so a retried
batch is byte-identical and no batch is lost or duplicated.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
import ray

from shardstream.proto.errors import ServiceUnavailable
from shardstream.service.batching import DecodeJob
from shardstream.service.decoder import DecodeWorker

log = logging.getLogger(__name__)

DECODE_RESOURCE = "decode"


@dataclass
class _Slot:
    actor: Any  # ActorHandle[DecodeWorker]
    in_flight: int = 0
    node_id: str = ""


class DecodePool:
    def __init__(self, num_decoders: int | None, decoder_cpus: float, cache_bytes: int) -> None:
        available = int(ray.cluster_resources().get(DECODE_RESOURCE, 0))
        count = num_decoders if num_decoders is not None else available
        if count < 1:
            raise ServiceUnavailable(
                f"the Ray cluster has no '{DECODE_RESOURCE}' resource: start nodes with "
                f"--resources='{{\"{DECODE_RESOURCE}\": N}}' or set num_decoders"
            )
        actor_cls = ray.remote(DecodeWorker).options(  # type: ignore[attr-defined]
            num_cpus=decoder_cpus,
            resources={DECODE_RESOURCE: 1} if available else {},
            max_restarts=-1,
            max_task_retries=-1,
            scheduling_strategy="SPREAD",
        )
        self._slots = [_Slot(actor_cls.remote(cache_bytes)) for _ in range(count)]
        self._lock = threading.Lock()
        self._job_refs: dict[str, ray.ObjectRef] = {}
        log.info("decode pool: %d decode actor(s)", count)

    @property
    def size(self) -> int:
        return len(self._slots)

    def wait_ready(self, timeout_s: float) -> None:
        """Block until every actor answers, or raise naming how many did."""
        refs: list[Any] = [s.actor.ping.remote() for s in self._slots]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
        if len(ready) < len(refs):
            raise ServiceUnavailable(
                f"only {len(ready)} of {len(refs)} decode actors started within {timeout_s:.0f} s: "
                "does the cluster have the CPUs and 'decode' resources they ask for?"
            )
        for slot, ref in zip(self._slots, refs, strict=True):
            slot.node_id = str(ray.get(ref))
        nodes = {slot.node_id for slot in self._slots}
        log.info("decode pool ready: %d actor(s) on %d node(s)", len(refs), len(nodes))

    def status(self) -> list[tuple[str, int]]:
        """(node id, in-flight batches) of each decode actor."""
        with self._lock:
            return [(slot.node_id, slot.in_flight) for slot in self._slots]

    def register(self, job: DecodeJob) -> None:
        with self._lock:
            if job.job_id not in self._job_refs:
                self._job_refs[job.job_id] = ray.put(job)

    def submit(self, job_id: str, epoch: int, indices: np.ndarray) -> tuple[ray.ObjectRef, int]:
        """Send one batch to the least-loaded actor; call `done(slot)` once its result is taken."""
        with self._lock:
            slot_id = min(range(len(self._slots)), key=lambda i: self._slots[i].in_flight)
            slot = self._slots[slot_id]
            slot.in_flight += 1
            job_box = [job_id, self._job_refs[job_id]]
        return slot.actor.decode.remote(job_box, epoch, indices), slot_id

    def done(self, slot_id: int) -> None:
        with self._lock:
            self._slots[slot_id].in_flight -= 1

    def shutdown(self) -> None:
        for slot in self._slots:
            ray.kill(slot.actor, no_restart=True)
        self._slots.clear()


__all__ = ["DECODE_RESOURCE", "DecodePool"]
