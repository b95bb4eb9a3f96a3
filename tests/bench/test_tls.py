"""bench.tls_cost's table: both modes and their ratios."""

from __future__ import annotations

from bench.tls_cost import tls_table


def test_the_table_shows_both_modes_and_the_ratios() -> None:
    results = {"median": {
        "plaintext": {"gb_per_s": 0.5, "consumer_cpu_per_gb": 0.4, "service_cpu_per_gb": 2.0},
        "tls": {"gb_per_s": 0.4, "consumer_cpu_per_gb": 0.6, "service_cpu_per_gb": 3.0}}}
    lines = tls_table(results).splitlines()
    assert [c.strip() for c in lines[2].split("|")[1:5]] == ["plaintext", "0.50", "0.40", "2.00"]
    assert [c.strip() for c in lines[3].split("|")[1:5]] == ["TLS", "0.40", "0.60", "3.00"]
    assert [c.strip() for c in lines[4].split("|")[1:5]] == ["TLS / plaintext", "0.80x", "1.50x", "1.50x"]
