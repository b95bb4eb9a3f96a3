"""The Prometheus names the service's decode scaling policy exports (service/shardstream/service/control/),
as the chart's HPA, the Prometheus adapter's rules and the dashboard use them."""

from __future__ import annotations

__all__ = ["BUSY_RATIO", "DECISIONS", "DECODERS", "DRAINING", "POLICY_ONLY", "SCALING_METRICS", "WANTED"]

# The decode actors the policy wants now: a gauge without labels, the one number the HPA scales on.
WANTED = "shardstream_decoders_wanted"
# Decode actors in the pool, ready (exported before the policy existed).
DECODERS = "shardstream_decoders"
# Decode actors being drained.
DRAINING = "shardstream_decoders_draining"
# The policy's decisions, by direction="up"|"down" (a counter: series names end in _total).
DECISIONS = "shardstream_scaling_decisions_total"
# The decoders' busy share over the policy's last window, 0..1.
BUSY_RATIO = "shardstream_decode_busy_ratio"
# The policy's series, each on the dashboard.
SCALING_METRICS = frozenset({WANTED, DRAINING, DECISIONS, BUSY_RATIO})
# Of those, exported only with the policy on (config.autoscale_max_decoders); the others always are.
POLICY_ONLY = frozenset({BUSY_RATIO})
