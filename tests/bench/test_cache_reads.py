"""bench.cache_reads times a job's view of the cache reading shuffled batches back: every sample of
each batch found, a time per sample, and the tiers removed afterwards."""

from __future__ import annotations

import numpy as np

from bench import cache_reads


def test_each_kind_is_read_back_whole_and_timed_per_sample() -> None:
    kinds = {"ids": (40, 8, lambda rng: {"input_ids": rng.integers(0, 9, 5)}),
             "picture": (6, 3, lambda rng: {"image": rng.integers(0, 256, (8, 8, 3), dtype=np.uint8), "label": 1})}
    rows = cache_reads.measure(0.02, kinds)
    assert [row[0] for row in rows] == ["ids", "picture"]
    assert [row[2] for row in rows] == ["8", "3"]
    assert all(float(row[3]) > 0 for row in rows)  # us per sample; _read_batch asserts every sample was found
    assert int(rows[1][1].replace(",", "")) > int(rows[0][1].replace(",", ""))  # entry bytes
