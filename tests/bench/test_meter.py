"""bench.meter: counting, the warm-up window and the consumer-side figures, on a fake loader."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from bench.meter import batch_shape, measure
from bench.spec import ConsumerSpec


class StepClock:
    """A clock that moves only when the loader or the consumer sleeps on it."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def _loader(batches: int, rows: int = 4, delay_s: float = 0.0,
            sleep: Callable[[float], None] = time.sleep) -> Any:
    @contextlib.contextmanager
    def open_loader() -> Iterator[Iterator[dict[str, np.ndarray]]]:
        def generate() -> Iterator[dict[str, np.ndarray]]:
            for i in range(batches):
                if delay_s:
                    sleep(delay_s)
                yield {"image": np.full((rows, 3, 2, 2), i, np.uint8), "label": np.arange(rows)}

        yield generate()

    return open_loader


def test_batch_shape_counts_leading_dimension_and_all_bytes() -> None:
    batch = {"image": np.zeros((8, 3, 4, 4), np.uint8), "label": np.zeros(8, np.int64)}
    assert batch_shape(batch) == (8, 8 * 48 + 8 * 8)
    assert batch_shape({}) == (0, 0)


def test_measure_counts_everything_and_windows_after_the_warmup() -> None:
    m = measure(_loader(10, delay_s=0.002), warmup_batches=3)
    per_batch = 4 * 12 + 4 * 8
    assert (m.batches, m.samples, m.nbytes) == (10, 40, 10 * per_batch)
    assert m.batch_bytes == per_batch
    assert (m.measured_samples, m.measured_bytes) == (28, 7 * per_batch)
    assert m.samples_per_s == pytest.approx(m.measured_samples / m.measured_s)
    assert m.mb_per_s == pytest.approx(m.measured_bytes / 1e6 / m.measured_s)
    assert 0.0 < m.stall_fraction <= 1.0
    assert m.ttfb_s >= m.construct_s >= 0.0
    assert m.rss_peak_mb >= m.rss_growth_mb >= 0.0
    assert m.cpu_total_per_1k == pytest.approx(m.cpu_self_per_1k + m.cpu_children_per_1k)


def test_measure_stops_at_max_batches() -> None:
    m = measure(_loader(100), max_batches=5)
    assert m.batches == 5


def test_a_consumer_that_works_between_batches_stalls_less() -> None:
    """Each batch takes 5 ms to come; a consumer that works 20 ms between batches waits a fifth
    of its time, one that only takes batches waits all of it (on a clock the sleeps move)."""
    clock = StepClock()
    busy = measure(_loader(8, delay_s=0.005, sleep=clock.sleep), step_s=0.02, clock=clock, sleep=clock.sleep)
    idle = measure(_loader(8, delay_s=0.005, sleep=clock.sleep), clock=clock, sleep=clock.sleep)
    assert busy.stall_fraction == pytest.approx(0.2)
    assert idle.stall_fraction == pytest.approx(1.0)


def test_no_window_when_everything_is_warmup() -> None:
    m = measure(_loader(3), warmup_batches=5)
    assert m.batches == 3 and m.measured_samples == 0 and m.samples_per_s == 0.0


def test_warmup_must_include_the_first_batch() -> None:
    with pytest.raises(ValueError):
        measure(_loader(3), warmup_batches=0)


def test_consumer_spec_round_trips_and_checks_its_fields(tmp_path: Any) -> None:
    spec = ConsumerSpec("dataloader", dataset="/data", workers=2, epochs=2, warmup_batches=10)
    spec.save(tmp_path / "spec.json")
    assert ConsumerSpec.load(tmp_path / "spec.json") == spec
    with pytest.raises(ValueError, match="unknown system"):
        ConsumerSpec("nope")
    with pytest.raises(ValueError):
        ConsumerSpec("dataloader", epochs=0)
