"""A transform whose decode cost is a sleep: each decode actor serves a fixed rate, whatever the
machine's cores are doing, so a 2-core machine can show how decode capacity follows demand
(bench/decode_scaling.py) without the decoders competing with the rank for CPU."""

from __future__ import annotations

import time
from typing import Any


class SimulatedDecode:
    def __init__(self, seconds_per_sample: float = 0.01) -> None:
        self.seconds_per_sample = seconds_per_sample

    def prepare(self, row: dict[str, Any]) -> dict[str, Any]:
        time.sleep(self.seconds_per_sample)
        return {"idx": row["idx"]}


def simulated_decode(**kwargs: Any) -> SimulatedDecode:
    return SimulatedDecode(**kwargs)


__all__ = ["SimulatedDecode", "simulated_decode"]
