"""The decode pool: decode actors that follow the cluster, each serving ranks on its own port.

Size: `num_decoders` when set, else one actor per unit of the cluster's
`decode` resource, re-read every `reconcile_s`: when a node with `decode`
resources joins, actors start there; when one leaves, its actors are dropped.
With the scaling policy on (decode_scaling.py), at most the actors it wants:
surplus ones are drained (they stop being listed, send every batch they had
accepted, end their streams with DecoderDraining) and then killed, so their
capacity goes back to the cluster without a batch lost or repeated.

Failover is the pool's, not Ray's (actors have no automatic restarts, which
would park work on an actor that may never be placed again): when an actor
dies (its process killed, its node lost) it stops being listed and a
replacement starts. Ranks ask the surviving decoders for the lost one's steps
(client/fetcher.py); decoding is pure, so a step decoded again is the same
batch. Each actor's once-a-second report (what it sent, what reading cost) is
also its liveness probe.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ray
from ray.exceptions import RayActorError

from shardstream.proto.errors import ServiceUnavailable
from shardstream.service.config import ServeSettings
from shardstream.service.control.node_ledger import NodeLedger
from shardstream.service.identities import IdentityTable
from shardstream.service.node.decoder import DecodeWorker
from shardstream.service.node_messages import DecodeJob, DirectReport, JobServed, ReadSettings
from shardstream.service.tls import TlsFiles

log = logging.getLogger(__name__)

DECODE_RESOURCE = "decode"
DRAIN_TIMEOUT_S = 30.0  # a draining actor with streams still open after this is killed (ranks refetch)
REPORTS_PER_S = 100.0  # the actor reports the coordinator takes a second, at most (0.07 cores)


def report_interval(actors: int, floor_s: float) -> float:
    """Seconds between one actor's reports when `actors` report: `floor_s` (the reconcile period)
    up to REPORTS_PER_S actors, then growing with them so their total rate stays REPORTS_PER_S."""
    return max(floor_s, actors / REPORTS_PER_S)


class SlotState(enum.Enum):
    STARTING = "starting"  # created, not yet answering
    READY = "ready"
    DRAINING = "draining"  # being given back: not listed, finishing the batches it accepted
    DEAD = "dead"


@dataclass
class _Slot:
    actor: Any  # ActorHandle[DecodeWorker]
    probe: Any  # ObjectRef of the first ping: ready when the actor runs
    state: SlotState = SlotState.STARTING
    queued: int = 0  # steps its batch server had accepted and not yet sent, at its last report
    streaming: dict[str, set[int]] = dataclasses.field(default_factory=dict)  # job -> ranks, ditto
    decoded: int = 0
    node_id: str = ""
    batch_address: str = ""  # its batch server, host:port
    heartbeat: Any = None  # ObjectRef of the last liveness probe
    next_report: float = 0.0  # time.monotonic() at which to ask for the next one
    opening: dict[str, Any] | None = None  # job id -> its open_job call, while the actor starts
    ready_at: float = 0.0  # time.monotonic() it became ready
    drain_started: float = 0.0  # ... it was told to drain
    reported_at: float = 0.0  # ... its last report arrived


class DecodePool:
    def __init__(self, num_decoders: int | None, decoder_cpus: float, read_settings: ReadSettings,
                 reconcile_s: float = 1.0, serving: ServeSettings | None = None, tls: TlsFiles | None = None,
                 wanted: int | None = None) -> None:
        self._fixed = num_decoders
        self._wanted = wanted  # the scaling policy's size (set_wanted); None: the policy is off
        # Following the cluster means one actor per `decode` unit; a fixed count on a
        # cluster without that resource places actors by CPU alone.
        use_resource = num_decoders is None or DECODE_RESOURCE in ray.cluster_resources()
        self._actor_cls = ray.remote(DecodeWorker).options(  # type: ignore[attr-defined]
            num_cpus=decoder_cpus,
            resources={DECODE_RESOURCE: 1} if use_resource else {},
            max_restarts=0,
            max_task_retries=0,
            scheduling_strategy="SPREAD",
        )
        self._read_settings = read_settings
        # With the prepared-sample cache on, every actor learns which actors run on which node
        # (the homes of prepared samples, prepared_peers.py) whenever that changes.
        self._shares_prepared = read_settings.prepared_cache_on
        self._peers_shared: frozenset[tuple[str, str]] = frozenset()
        self._serving = serving or ServeSettings()  # each actor's batch server: ports, deadline, size
        self._tls = tls  # ... speaking TLS with these files, which must be on every decode node
        self.nodes = NodeLedger()  # each node's reads and prepared-cache bounds, from its actors
        self._slots: list[_Slot] = []
        self._job_refs: dict[str, Any] = {}
        self._job_opened: dict[str, list[Any]] = {}  # job id -> the actors' open_job calls
        self._job_held: set[str] = set()  # jobs every actor listed holds: registering again is free
        self._cond = threading.Condition()
        self._stopped = threading.Event()
        # What the actors' batch servers sent, per job (server.py counts it in the job registry).
        self.on_served: Callable[[str, JobServed], None] = lambda _job_id, _served: None
        self.on_decoded: Callable[[list[float]], None] = lambda _seconds: None  # ... and how long each took
        # ... and the streams they refused by the tokens file: (identity, reason) -> count
        self.on_refused: Callable[[dict[tuple[str, str], int]], None] = lambda _refusals: None
        self.replaced_actors = 0  # actors lost (killed, crashed, node gone)
        self.drained_actors = 0  # actors given back by the scaling policy
        self._reconcile_s = reconcile_s
        self._reconcile()
        self._watcher = threading.Thread(target=self._watch, args=(reconcile_s,), name="shardstream-pool",
                                         daemon=True)
        self._watcher.start()

    # ------------------------------------------------------------ membership

    def desired(self) -> int:
        if self._fixed is not None:
            return self._fixed
        units = int(ray.cluster_resources().get(DECODE_RESOURCE, 0))
        return units if self._wanted is None else min(units, self._wanted)

    def set_wanted(self, wanted: int) -> None:
        """The scaling policy's size: actors start up to it as the cluster has room, and beyond it
        are drained at the next reconcile."""
        with self._cond:
            self._wanted = wanted

    def _watch(self, interval_s: float) -> None:
        while not self._stopped.wait(interval_s):
            try:
                self._reconcile()
            except Exception:  # the watcher must outlive a flaky GCS call
                log.exception("decode pool reconcile failed")

    def _reconcile(self) -> None:
        alive_nodes = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
        desired = self.desired()
        with self._cond:
            interval = report_interval(sum(s.state is SlotState.READY for s in self._slots), self._reconcile_s)
            for slot in self._slots:
                if slot.state is SlotState.STARTING:
                    self._check_started(slot)
                elif slot.node_id not in alive_nodes:
                    self._bury(slot, "its node left the cluster")
                else:
                    self._check_alive(slot, interval)
                    if slot.state is SlotState.DRAINING:
                        self._check_drained(slot)
            self._slots = [s for s in self._slots if s.state is not SlotState.DEAD]
            live = [s for s in self._slots if s.state is not SlotState.DRAINING]
            for _ in range(desired - len(live)):
                self._slots.append(self._spawn())
            surplus = len(live) - desired
            for slot in [s for s in live if s.state is SlotState.STARTING][:max(surplus, 0)]:
                ray.kill(slot.actor, no_restart=True)  # cannot be placed, or no longer wanted
                slot.state = SlotState.DEAD
                surplus -= 1
            for slot in self._drain_order()[:max(surplus, 0)]:
                self._drain(slot)
            self._slots = [s for s in self._slots if s.state is not SlotState.DEAD]
            self._share_peers()
            self._cond.notify_all()

    def _drain_order(self) -> list[_Slot]:
        """Ready actors, the first to give back first: those on nodes with the fewest ready actors
        (the whole node is freed soonest, and the autoscaler can remove it), newest first."""
        ready = [s for s in self._slots if s.state is SlotState.READY]
        per_node: dict[str, int] = {}
        for slot in ready:
            per_node[slot.node_id] = per_node.get(slot.node_id, 0) + 1
        return sorted(ready, key=lambda s: (per_node[s.node_id], -s.ready_at))

    def _drain(self, slot: _Slot) -> None:
        """Stop listing the actor and tell it to finish what it accepted (holding the lock)."""
        slot.state = SlotState.DRAINING
        slot.drain_started = time.monotonic()
        slot.actor.drain.remote()
        self.drained_actors += 1
        log.info("draining the decode actor on node %s (%s): the pool wants fewer", slot.node_id[:12],
                 slot.batch_address)

    def _check_drained(self, slot: _Slot) -> None:
        """Kill a draining actor once a report after the drain shows no stream open and nothing
        queued, or when DRAIN_TIMEOUT_S has passed (its ranks then fetch what is left elsewhere)."""
        now = time.monotonic()
        idle = slot.reported_at > slot.drain_started and not slot.streaming and not slot.queued
        if idle or now - slot.drain_started > DRAIN_TIMEOUT_S:
            ray.kill(slot.actor, no_restart=True)
            slot.state = SlotState.DEAD
            log.info("gave back the decode actor on node %s after %.1f s of draining%s", slot.node_id[:12],
                     now - slot.drain_started, "" if idle else " (streams still open: their ranks refetch)")

    def _share_peers(self) -> None:
        """Tell every ready actor the ready actors of each node, when they changed (holding the lock)."""
        if not self._shares_prepared:
            return
        ready = [s for s in self._slots if s.state is SlotState.READY]
        members = frozenset((s.node_id, s.batch_address) for s in ready)
        if members == self._peers_shared:
            return
        nodes: dict[str, list[Any]] = {}
        for slot in ready:
            nodes.setdefault(slot.node_id, []).append(slot.actor)
        for slot in ready:
            slot.actor.set_peers.remote(nodes)
        self._peers_shared = members

    def _spawn(self) -> _Slot:
        actor = self._actor_cls.remote(self._read_settings, self._serving, self._tls)
        return _Slot(actor=actor, probe=actor.hello.remote())  # type: ignore[attr-defined]

    def _check_started(self, slot: _Slot) -> None:
        """STARTING -> READY once the actor answers and holds every open job: ranks are sent to
        its batch server only then, so a decoder that joins mid-epoch never answers JobNotFound."""
        if slot.opening is None:
            if not ray.wait([slot.probe], timeout=0)[0]:
                return
            try:
                slot.node_id, slot.batch_address, sizing = ray.get(slot.probe)
            except RayActorError as exc:  # it failed to start (e.g. no free data port): say why, then retry
                log.error("a decode actor failed to start: %s", exc)
                slot.state = SlotState.DEAD
                return
            slot.opening = {}
            self.nodes.note_cache_sizing(slot.node_id, sizing)
        for job_id, ref in self._job_refs.items():
            if job_id not in slot.opening:
                slot.opening[job_id] = slot.actor.open_job.remote([job_id, ref])
        pending = list(slot.opening.values())
        if pending and ray.wait(pending, num_returns=len(pending), timeout=0)[1]:
            return
        for ref in pending:
            try:
                ray.get(ref)
            except RayActorError:
                slot.state = SlotState.DEAD
                return
            except Exception:  # a job the actor cannot open: its ranks hear why when they fetch
                log.exception("a decode actor could not open a job")
        slot.state = SlotState.READY
        slot.opening = None
        slot.ready_at = time.monotonic()
        log.info("decode actor ready on node %s", slot.node_id[:12])

    def _check_alive(self, slot: _Slot, interval_s: float) -> None:
        """Notice an actor that died while nothing was submitted to it: ranks fetching from its batch
        server directly see it fail, and the pool must replace it and stop listing it. The last
        probe is checked without waiting (a busy actor answers late, which is no death). The probe
        is the actor's report of what its batch server sent and read since the last one; the next
        is asked for `interval_s` after the last was (report_interval)."""
        if slot.heartbeat is not None:
            ready, _ = ray.wait([slot.heartbeat], timeout=0)
            if not ready:
                return
            try:
                report: DirectReport = ray.get(slot.heartbeat)
            except RayActorError:
                self._bury(slot, "it stopped answering")
                return
            self.nodes.add_reads(slot.node_id, report.reads)
            slot.decoded += sum(served.batches for served in report.served.values())
            slot.queued, slot.streaming = report.queued, report.streaming
            slot.reported_at = time.monotonic()
            for job_id, served in report.served.items():
                self.on_served(job_id, served)
            self.on_decoded(report.decode_seconds)
            if report.refusals:
                self.on_refused(report.refusals)
            slot.heartbeat = None
        now = time.monotonic()
        if now >= slot.next_report - self._reconcile_s / 2:  # this tick, not the one after
            slot.heartbeat = slot.actor.report.remote()
            slot.next_report = now + interval_s

    def _bury(self, slot: _Slot, why: str) -> None:
        if slot.state is not SlotState.DEAD:
            log.warning("decode actor on node %s is gone (%s); ranks fetch its steps from the others",
                        slot.node_id[:12], why)
            slot.state = SlotState.DEAD
            self.replaced_actors += 1

    def wait_ready(self, timeout_s: float) -> None:
        """Block until the wanted number of actors answer; raise if none does in time.

        A cluster with no `decode` units yet (decode nodes still starting) is not an
        error: the service starts, and streams wait for decoders as they join.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            self._reconcile()
            with self._cond:
                ready = sum(s.state is SlotState.READY for s in self._slots)
                if self.desired() == 0:
                    log.warning("the Ray cluster has no '%s' resource yet: decode actors start as nodes "
                                "with it join (ray start --resources='{\"%s\": N}')",
                                DECODE_RESOURCE, DECODE_RESOURCE)
                    return
                if ready >= self.desired():
                    break
                if time.monotonic() > deadline:
                    if ready:
                        log.warning("only %d of %d decode actors started in %.0f s", ready, self.desired(),
                                    timeout_s)
                        break
                    raise ServiceUnavailable(
                        f"no decode actor started within {timeout_s:.0f} s: does the cluster have the "
                        f"CPUs and '{DECODE_RESOURCE}' resources they ask for?")
            time.sleep(0.05)
        log.info("decode pool ready: %d actor(s) on %d node(s)", ready,
                 len({s.node_id for s in self._slots if s.state is SlotState.READY}))

    @property
    def size(self) -> int:
        with self._cond:
            return sum(s.state is SlotState.READY for s in self._slots)

    @property
    def draining(self) -> int:
        with self._cond:
            return sum(s.state is SlotState.DRAINING for s in self._slots)

    @property
    def settled(self) -> bool:
        """No actor starting or draining."""
        with self._cond:
            return all(s.state is SlotState.READY for s in self._slots)

    def status(self) -> list[tuple[str, int, int]]:
        """(node id, steps queued at its last report, batches sent) of each ready decode actor."""
        with self._cond:
            return [(s.node_id, s.queued, s.decoded) for s in self._slots if s.state is SlotState.READY]

    def streaming_ranks(self) -> dict[str, int]:
        """job id -> how many of its ranks had a batch stream open on a live decoder at its last report."""
        ranks: dict[str, set[int]] = {}
        with self._cond:
            for slot in self._slots:
                if slot.state is SlotState.READY:
                    for job_id, here in slot.streaming.items():
                        ranks.setdefault(job_id, set()).update(here)
        return {job_id: len(r) for job_id, r in ranks.items()}

    def batch_addresses(self) -> list[str]:
        """host:port of every ready actor's batch server."""
        with self._cond:
            return [s.batch_address for s in self._slots if s.state is SlotState.READY]

    def ready_actors(self) -> list[tuple[str, Any]]:
        """(node id, actor handle) of each ready decode actor, for operators and fault drills."""
        with self._cond:
            return [(s.node_id, s.actor) for s in self._slots if s.state is SlotState.READY]

    # ------------------------------------------------------------ jobs

    def register(self, job: DecodeJob, timeout_s: float = 30.0) -> None:
        """Ship the job's descriptor to every actor (and to actors that start later), and wait until
        the actors ready now have it, so a rank's first fetch from any of them finds the job."""
        with self._cond:
            if job.job_id in self._job_held:
                return  # every actor has had it (and actors that start later get it before being listed)
            opened = self._job_opened.get(job.job_id)
            if opened is None:
                ref = self._job_refs[job.job_id] = ray.put(job)
                actors = [s.actor for s in self._slots if s.state is SlotState.READY]
                opened = self._job_opened[job.job_id] = [a.open_job.remote([job.job_id, ref]) for a in actors]
        waiting = ray.wait(opened, num_returns=len(opened), timeout=timeout_s)[1] if opened else []
        if not waiting:
            with self._cond:
                if job.job_id in self._job_opened:
                    self._job_held.add(job.job_id)
        if waiting:
            log.warning("%d decode actor(s) did not open job %s within %.0f s", len(waiting), job.job_id,
                        timeout_s)

    def set_identities(self, table: IdentityTable, timeout_s: float = 10.0) -> None:
        """A changed tokens file: every actor (starting ones too, and those that start later) gets
        the new table; wait until the ready ones have it."""
        with self._cond:
            self._serving = dataclasses.replace(self._serving, identities=table)
            calls = [(s.state, s.actor.set_identities.remote(table)) for s in self._slots
                     if s.state is not SlotState.DEAD]
        ready = [call for state, call in calls if state is SlotState.READY]
        waiting = ray.wait(ready, num_returns=len(ready), timeout=timeout_s)[1] if ready else []
        if waiting:
            log.warning("%d decode actor(s) did not take the changed tokens file within %.0f s", len(waiting),
                        timeout_s)

    def forget(self, job_id: str) -> None:
        """Release a job's descriptor here and on every actor."""
        with self._cond:
            self._job_refs.pop(job_id, None)
            self._job_opened.pop(job_id, None)
            self._job_held.discard(job_id)
            actors = [s.actor for s in self._slots if s.state is SlotState.READY]
        for actor in actors:
            actor.forget.remote(job_id)

    def shutdown(self) -> None:
        """Stop watching and kill the actors (their ranks' streams end with UNAVAILABLE)."""
        self._stopped.set()
        self._watcher.join(timeout=5)
        with self._cond:
            for slot in self._slots:
                ray.kill(slot.actor, no_restart=True)
            self._slots.clear()
            self._cond.notify_all()


__all__ = ["DECODE_RESOURCE", "REPORTS_PER_S", "DecodePool", "SlotState", "report_interval"]
