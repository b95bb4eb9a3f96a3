"""A user transform that tests name by import path ("tests.transforms:scaled")."""

from __future__ import annotations

from typing import Any

import numpy as np


class Scaled:
    """prepare: x * factor (deterministic); augment: adds the sample's own random draw."""

    def __init__(self, factor: float = 2.0) -> None:
        self.factor = factor

    def prepare(self, row: dict[str, Any]) -> dict[str, Any]:
        return {"idx": row["idx"], "x": np.asarray(row["x"], dtype=np.float32) * self.factor}

    def augment(self, sample: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
        return {**sample, "noise": np.float32(rng.random())}


def scaled(**kwargs: Any) -> Scaled:
    return Scaled(**kwargs)


class Slow:
    """Plain columns, `delay_s` per sample: long enough epochs to inject faults into."""

    def __init__(self, delay_s: float = 0.01) -> None:
        self.delay_s = delay_s

    def prepare(self, row: dict[str, Any]) -> dict[str, Any]:
        import time

        time.sleep(self.delay_s)
        return {"idx": row["idx"]}


def slow(**kwargs: Any) -> Slow:
    return Slow(**kwargs)
