"""The service's status (a ServiceStatus) as the text `shardstream status` prints: the decoders by
node with their reads and caches, the decode scaling policy's last decision, each job with a row per
rank (docs/observability.md)."""

from __future__ import annotations

from typing import Any


def repainted(text: str, first: bool) -> str:
    """`text` drawn over the last screen from its top-left corner: a cleared screen the first time,
    then each line overwritten and cleared to its end and the rest below cleared, so a watched
    table changes in place without flicker."""
    return ("\x1b[H\x1b[2J" if first else "\x1b[H") + text.replace("\n", "\x1b[K\n") + "\x1b[J"


def status_text(address: str, status: Any) -> str:
    nodes = {d.node_id for d in status.decoder_status}
    lines = [f"service {address}: protocol v{status.protocol_version}, {status.decoders} decoder(s) "
             f"on {len(nodes)} node(s), up {status.uptime_seconds:.0f} s, {len(status.jobs)} job(s)"]
    lines.extend(_scaling_lines(status.scaling))
    reads = {r.node_id: r for r in status.node_reads}
    for node in sorted(nodes | set(reads)):
        here = [d for d in status.decoder_status if d.node_id == node]
        lines.append(f"  node {node[:12]}: {len(here)} decoder(s), {sum(d.in_flight for d in here)} "
                     f"step(s) queued, {sum(d.decoded for d in here)} sent")
        if node in reads:
            lines.append("    " + _reads_line(reads[node]))
            lines.extend(_cache_sizing_lines(reads[node]))
    for job in status.jobs:
        lines.append(
            f"  job {job.job_id} {job.job_name!r}{f' (identity {job.owner})' if job.owner else ''}: "
            f"{job.num_samples} samples, world {job.world_size}, "
            f"{job.batches_per_rank} batches/rank; {job.samples_per_second:.0f} samples/s now; "
            f"served {job.batches_served} batches, "
            f"{job.bytes_served / 1e6:.1f} MB, {job.samples_replaced} replaced; "
            f"{job.active_streams} active stream(s)"
        )
        if job.dataset_fingerprint:
            lines.append(f"    {job.format or 'parquet'} dataset {job.dataset_fingerprint}, pipeline {job.pipeline_hash}")
        lines.extend(_source_lines(job))
        lines.extend(_status_ranks(job))
    return "\n".join(lines) + "\n"


def _source_lines(job: Any) -> list[str]:
    """A mixture's sources: each one's share of what was served, to check against its weight."""
    served = sum(s.samples_served for s in job.sources) or 1
    tokens = sum(s.tokens_served for s in job.sources) or 1
    return [f"    source {s.name!r}: {s.num_samples} samples; served {s.samples_served} samples "
            f"({s.samples_served / served:.1%}), {s.tokens_served} tokens ({s.tokens_served / tokens:.1%})"
            for s in job.sources]


def _scaling_lines(scaling: Any) -> list[str]:
    """The decode scaling policy's last decision and why (docs/decode-scaling.md)."""
    if not scaling.enabled:
        return []
    lines = [f"  decode scaling ({scaling.min_decoders}-{scaling.max_decoders}): wants {scaling.wanted}, "
             f"{scaling.ready} ready, {scaling.draining} draining; decoders busy {scaling.busy_ratio:.0%}; "
             f"{scaling.decisions_up} up, {scaling.decisions_down} down so far",
             f"    now: {scaling.decision}: {scaling.reason}"]
    if scaling.last_change:
        lines.append(f"    last change, {scaling.last_change_seconds_ago:.0f} s ago: {scaling.last_change}")
    return lines


def _status_ranks(job: Any) -> list[str]:
    """A job's ranks, a row each: the latest step sent, batches/s, data stall and lag
    (docs/observability.md), under a line naming the worst stall: a synchronous job runs at that rank's pace."""
    if not job.ranks:
        return []
    stalls = [(r.data_stall, r.rank) for r in job.ranks if r.HasField("data_stall")]
    lines = []
    if stalls:
        worst, rank = max(stalls)
        lines.append(f"    data stall: worst {worst:.1%} (rank {rank}), mean {sum(s for s, _ in stalls) / len(stalls):.1%} "
                     f"over {len(stalls)} rank(s)")
    lines.append(f"    {'rank':>6} {'epoch/step':>12} {'batches/s':>10} {'stall':>7} {'lag':>6}")
    for r in job.ranks:
        where = f"{r.epoch}/{r.step}" if r.position_batches else "-"
        stall = f"{r.data_stall:.1%}" if r.HasField("data_stall") else "-"
        lines.append(f"    {r.rank:>6} {where:>12} {r.batches_per_second:>10.1f} {stall:>7} {r.lag_batches:>6}")
    return lines


def _reads_line(r: Any) -> str:
    """One node's storage reads and cache tiers, for `shardstream status`."""
    def rate(hits: int, misses: int) -> str:
        return f"{hits / (hits + misses):.1%}" if hits + misses else "-"

    return (f"read {r.storage_bytes_read / 1e6:,.1f} MB from storage ({r.storage_row_groups_read} row "
            f"group(s)); hits: memory {rate(r.memory_hits, r.memory_misses)} of "
            f"{r.memory_hits + r.memory_misses}, local disk {rate(r.disk_hits, r.disk_misses)} of "
            f"{r.disk_hits + r.disk_misses}; local copy {r.disk_bytes / 1e6:,.1f} MB" + _prepared_text(r))


def _cache_sizing_lines(r: Any) -> list[str]:
    """The bounds the node's prepared-sample cache got, and why (node/cache_sizing.py)."""
    if not (r.prepared_memory_sizing or r.prepared_disk_sizing):
        return []
    return [f"    prepared-sample cache, {tier} tier: " + (f"{bound / 1e9:,.2f} GB ({why})" if bound else why)
            for tier, bound, why in (("memory", r.prepared_memory_bound, r.prepared_memory_sizing),
                                     ("disk", r.prepared_disk_bound, r.prepared_disk_sizing))]


def _prepared_text(r: Any) -> str:
    """The node's prepared-sample cache, when it was asked for samples."""
    found = r.prepared_memory_hits + r.prepared_disk_hits + r.prepared_peer_hits
    looked = found + r.prepared_misses
    if not looked and not (r.prepared_memory_bytes or r.prepared_disk_bytes):
        return ""
    hit = found / looked if looked else 0.0
    return (f"; prepared samples: {hit:.1%} of {looked} found (memory {r.prepared_memory_hits}, disk "
            f"{r.prepared_disk_hits}, other nodes {r.prepared_peer_hits}), "
            f"{r.prepared_deferred} kept later (write budget), "
            f"{r.prepared_memory_bytes / 1e6:,.1f} MB in memory, "
            f"{r.prepared_disk_bytes / 1e6:,.1f} MB on disk")


__all__ = ["repainted", "status_text"]
