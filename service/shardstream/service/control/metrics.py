"""Prometheus metrics: throughput, bytes, queue depth, per-rank lag and data stall, decode latency, errors.

Counters that the job registry already keeps (batches, samples, bytes,
replaced samples) are read at scrape time by a collector instead of being
counted twice; only latencies and errors are recorded as they happen.
Each service has its own registry, so several services in one process
(tests) never collide.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from shardstream.service.control.bounded import StorageCalls
from shardstream.service.control.decode_scaling import DecodeScaling
from shardstream.service.control.jobs import JobRegistry
from shardstream.service.control.pool import DecodePool
from shardstream.service.identities import Refusals
from shardstream.service.node_messages import CAUSES, FAULT_CACHES, TIERS

log = logging.getLogger(__name__)

ERROR_CODES = ("INVALID_ARGUMENT", "NOT_FOUND", "FAILED_PRECONDITION", "PERMISSION_DENIED", "UNAUTHENTICATED",
               "RESOURCE_EXHAUSTED", "DEADLINE_EXCEEDED", "UNAVAILABLE", "INTERNAL")
DECODERS_WANTED = "shardstream_decoders_wanted"  # one definition: the HPA's metric (helm/shardstream)
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class ServiceMetrics:
    def __init__(self, registry: JobRegistry, pool: DecodePool, storage_calls: StorageCalls,
                 refusals: Refusals | None = None, scaling: DecodeScaling | None = None) -> None:
        self.prometheus = CollectorRegistry()
        self.decode_seconds = Histogram(
            "shardstream_decode_seconds", "Time a decode actor spent producing one batch",
            buckets=LATENCY_BUCKETS, registry=self.prometheus)
        self.errors = Counter(
            "shardstream_errors", "RPCs that ended in an error, by gRPC status code", ["code"],
            registry=self.prometheus)
        for code in ERROR_CODES:  # at 0 from the start, so rate() sees a code's first error
            self.errors.labels(code)
        Gauge("shardstream_storage_calls_abandoned",
              "Storage calls (dataset listings) still running past their request's deadline",
              registry=self.prometheus).set_function(lambda: storage_calls.abandoned)
        self.prometheus.register(_StateCollector(registry, pool))
        self.prometheus.register(_ScalingCollector(pool, scaling))
        if refusals is not None:  # with a tokens file
            self.prometheus.register(_RefusalsCollector(refusals))

    def batches_decoded(self, decode_s: list[float]) -> None:
        """Decode times the actors' batch servers reported."""
        for seconds in decode_s:
            self.decode_seconds.observe(seconds)

    def serve_http(self, host: str, port: int) -> WSGIServer:
        server, _thread = start_http_server(port, addr=host, registry=self.prometheus)
        log.info("metrics on http://%s:%d/metrics", host, server.server_port)
        return server


class _RefusalsCollector(Collector):
    """Calls refused by the tokens file, on the service's port and the decoders' (identities.py)."""

    def __init__(self, refusals: Refusals) -> None:
        self.refusals = refusals

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily("shardstream_auth_refusals",
                                     "Calls refused by the tokens file, by identity ('unknown': no known token) "
                                     "and reason", labels=["identity", "reason"])
        for (identity, reason), count in sorted(self.refusals.totals().items()):
            family.add_metric([identity, reason], count)
        yield family


class _ScalingCollector(Collector):
    """What the decode pool wants and has (decode_scaling.py): the HPA scales decode pods on
    shardstream_decoders_wanted, the same number the service asks the Ray autoscaler for."""

    def __init__(self, pool: DecodePool, scaling: DecodeScaling | None) -> None:
        self.pool = pool
        self.scaling = scaling

    def collect(self) -> Iterator[Metric]:
        state = self.scaling.state if self.scaling is not None else None
        yield GaugeMetricFamily(
            DECODERS_WANTED, "Decode actors the scaling policy wants now (without it: the pool's size); the "
            "HPA scales decode pods on it", value=state.decision.wanted if state is not None else self.pool.size)
        yield GaugeMetricFamily("shardstream_decoders_draining",
                                "Decode actors being given back: not listed, finishing what they accepted",
                                value=self.pool.draining)
        decisions = CounterMetricFamily("shardstream_scaling_decisions",
                                        "The scaling policy's decisions to change the pool's size", labels=["direction"])
        decisions.add_metric(["up"], state.up if state is not None else 0)
        decisions.add_metric(["down"], state.down if state is not None else 0)
        yield decisions
        if state is not None:
            yield GaugeMetricFamily(
                "shardstream_decode_busy_ratio", "The decoders' busy share over the scaling policy's last window",
                value=state.busy_ratio)


class _StateCollector(Collector):
    """Reads job counters, rank progress and decoder queues at scrape time."""

    def __init__(self, registry: JobRegistry, pool: DecodePool) -> None:
        self.registry = registry
        self.pool = pool

    def collect(self) -> Iterator[Metric]:
        counters: dict[str, Any] = {
            name: CounterMetricFamily(f"shardstream_{name}", help_text, labels=["job"])
            for name, help_text in (
                ("batches_served", "Batches streamed to clients"),
                ("samples_served", "Samples streamed to clients"),
                ("bytes_served", "Tensor bytes streamed to clients"),
                ("samples_replaced", "Corrupt samples replaced under on_corrupt=skip"),
            )
        }
        streams = GaugeMetricFamily("shardstream_active_streams",
                                    "Ranks with a batch stream open on a decoder, at the decoders' last report",
                                    labels=["job"])
        streaming = self.pool.streaming_ranks()
        position = GaugeMetricFamily("shardstream_rank_position_batches",
                                     "Batches served to a rank so far (epoch * batches_per_rank + step + 1)",
                                     labels=["job", "rank"])
        lag = GaugeMetricFamily("shardstream_rank_lag_batches",
                                "Batches a rank is behind its job's furthest rank", labels=["job", "rank"])
        stall = GaugeMetricFamily("shardstream_rank_data_stall_ratio",
                                  "Share (0..1) of a rank's training loop time spent waiting for data in the "
                                  "loader, over its last ~10 s, as it last reported it", labels=["job", "rank"])
        job_stall = GaugeMetricFamily("shardstream_job_data_stall_ratio",
                                      "The largest data stall ratio among a job's ranks (the one a synchronous "
                                      "job waits for)", labels=["job"])
        by_source = {name: CounterMetricFamily(f"shardstream_source_{name}", help_text, labels=["job", "source"])
                     for name, help_text in (("samples_served", "A mixture's samples streamed, by source"),
                                             ("tokens_served", "A mixture's tokens (input_ids, without padding) "
                                                               "streamed, by source"))}
        for job in self.registry.all():
            c = job.counters
            for name, family in counters.items():
                family.add_metric([job.label], getattr(c, name))
            for i, (source, _rows) in enumerate(job.index.sources):
                by_source["samples_served"].add_metric([job.label, source], c.source_samples[i] if c.source_samples else 0)
                by_source["tokens_served"].add_metric([job.label, source], c.source_tokens[i] if c.source_tokens else 0)
            streams.add_metric([job.label], streaming.get(job.job_id, 0))
            ranks = job.ranks()
            for rank in ranks:
                if rank.position:
                    position.add_metric([job.label, str(rank.rank)], rank.position)
                    lag.add_metric([job.label, str(rank.rank)], rank.lag)
                if rank.data_stall is not None:
                    stall.add_metric([job.label, str(rank.rank)], rank.data_stall)
            stalls = [rank.data_stall for rank in ranks if rank.data_stall is not None]
            if stalls:
                job_stall.add_metric([job.label], max(stalls))
        yield from counters.values()
        yield from by_source.values()
        yield from (streams, position, lag, stall, job_stall)
        status = self.pool.status()
        decoders = GaugeMetricFamily("shardstream_decoders", "Decode actors in the pool")
        decoders.add_metric([], len(status))
        depth = GaugeMetricFamily("shardstream_decode_queue_depth",
                                  "Steps decode actors' batch servers were decoding or waiting to decode at "
                                  "their last report, by node",
                                  labels=["node"])
        per_node: dict[str, int] = {}
        for node, in_flight, _decoded in status:
            per_node[node] = per_node.get(node, 0) + in_flight
        for node, in_flight in sorted(per_node.items()):
            depth.add_metric([node], in_flight)
        lost = CounterMetricFamily("shardstream_decoders_lost", "Decode actors lost (killed, crashed, node gone)")
        lost.add_metric([], self.pool.replaced_actors)
        yield from (decoders, depth, lost)
        yield from self._reads()

    def _reads(self) -> Iterator[Metric]:
        """Storage bytes read and cache hits/misses per tier, by decode node."""
        storage = CounterMetricFamily("shardstream_storage_bytes_read",
                                      "Bytes read from datasets' storage (footers included)", labels=["node"])
        groups = CounterMetricFamily("shardstream_storage_row_groups_read",
                                     "Row groups read from datasets' storage", labels=["node"])
        hits = CounterMetricFamily("shardstream_cache_hits", "Row groups found in a cache tier",
                                   labels=["tier", "node"])
        misses = CounterMetricFamily("shardstream_cache_misses", "Row groups a cache tier did not hold",
                                     labels=["tier", "node"])
        cached = GaugeMetricFamily("shardstream_cache_bytes", "Bytes a cache tier holds", labels=["tier", "node"])
        prepared_hits = CounterMetricFamily("shardstream_prepared_cache_hits",
                                            "Samples found prepared in a tier of the node's prepared-sample cache",
                                            labels=["tier", "node"])
        prepared_misses = CounterMetricFamily("shardstream_prepared_cache_misses",
                                              "Samples read and prepared with the prepared-sample cache on",
                                              labels=["node"])
        prepared_deferred = CounterMetricFamily(
            "shardstream_prepared_cache_deferred", "Samples prepared and not kept, because the decode actor had "
            "spent its share of time on keeping samples; kept when prepared again", labels=["node"])
        prepared_bytes = GaugeMetricFamily("shardstream_prepared_cache_bytes",
                                           "Bytes a tier of the prepared-sample cache holds", labels=["tier", "node"])
        faults = CounterMetricFamily("shardstream_cache_faults",
                                     "Cache entries refused on reading (a damaged, misplaced, short or unreadable "
                                     "entry), each read again from storage: by cache (memory, disk, peer, "
                                     "local_copy) and cause", labels=["node", "cache", "cause"])
        verify = CounterMetricFamily("shardstream_cache_verify_seconds",
                                     "Time decode actors spent verifying cache entries' keys and checksums",
                                     labels=["node"])
        keep = CounterMetricFamily("shardstream_prepared_cache_keep_seconds",
                                   "Time decode actors spent keeping prepared samples (encoding, checksums, "
                                   "writes), within their write budget", labels=["node"])
        for node, reads in sorted(self.pool.nodes.reads_by_node().items()):
            for cache in FAULT_CACHES:  # at 0 from the start, so rate() sees a cause's first fault
                for cause in CAUSES:
                    faults.add_metric([node, cache, cause], reads.faults.get((cache, cause), 0))
            verify.add_metric([node], reads.verify_seconds)
            keep.add_metric([node], reads.keep_seconds)
            storage.add_metric([node], reads.storage_bytes)
            groups.add_metric([node], reads.storage_reads)
            for tier in TIERS:
                hits.add_metric([tier, node], reads.hits(tier))
                misses.add_metric([tier, node], reads.misses(tier))
            cached.add_metric(["disk", node], reads.disk_bytes)
            for tier in TIERS:
                prepared_hits.add_metric([tier, node], getattr(reads, f"prepared_{tier}_hits"))
                prepared_bytes.add_metric([tier, node], getattr(reads, f"prepared_{tier}_bytes"))
            prepared_hits.add_metric(["peer", node], reads.prepared_peer_hits)
            prepared_misses.add_metric([node], reads.prepared_misses)
            prepared_deferred.add_metric([node], reads.prepared_deferred)
        yield from (storage, groups, hits, misses, cached, prepared_hits, prepared_misses, prepared_deferred, prepared_bytes, faults,
                    verify, keep)


__all__ = ["DECODERS_WANTED", "ServiceMetrics"]
