"""The shardstream benchmark: one JPEG workload, four data loaders, one transport microbenchmark.

    python -m bench            # full run: every system, 3 repetitions, medians, targets
    python -m bench --quick    # smoke run: tiny workload, 1 repetition
    python -m bench.scaling    # throughput against the number of decode actors
    python -m bench.profile    # where the service's time goes (py-spy)

See docs/benchmarks.md for the methodology and what each number means.
"""
