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
    """Plain columns, `delay_s` per sample: long enough epochs to inject faults into, every epoch (not
    kept in the prepared-sample cache, which would make later epochs fast)."""

    cache_prepared = False

    def __init__(self, delay_s: float = 0.01) -> None:
        self.delay_s = delay_s

    def prepare(self, row: dict[str, Any]) -> dict[str, Any]:
        import time

        time.sleep(self.delay_s)
        return {"idx": row["idx"]}


def slow(**kwargs: Any) -> Slow:
    return Slow(**kwargs)


class Tokenize:
    """A stand-in tokenizer: each row's `idx` becomes 1 + idx % 5 token ids (variable length), a
    caption string, and a bfloat16 score."""

    def prepare(self, row: dict[str, Any]) -> dict[str, Any]:
        import torch

        n = 1 + int(row["idx"]) % 5
        return {"ids": list(range(int(row["idx"]), int(row["idx"]) + n)), "caption": f"sample {row['idx']}",
                "score": torch.tensor([row["idx"] / 4], dtype=torch.bfloat16)}


def tokenize(**kwargs: Any) -> Tokenize:
    return Tokenize(**kwargs)


def sum_collate(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """A user collate: the batch's idx summed, and its captions."""
    import numpy as np

    return {"idx_sum": np.array([sum(int(s["idx"]) for s in samples)]),
            "names": [f"#{s['idx']}" for s in samples]}


def bad_collate(samples: list[dict[str, Any]]) -> dict[str, Any]:
    return {"rows": [{"idx": s["idx"]} for s in samples]}


class PresentFields:
    """A sample's fields that hold a value, as one string: any dataset, any fields."""

    def prepare(self, row: dict[str, Any]) -> dict[str, Any]:
        return {"present": ",".join(sorted(name for name, value in row.items() if value is not None))}


def present_fields(**kwargs: Any) -> PresentFields:
    return PresentFields(**kwargs)


class TextLength:
    """A JSON Lines row's `idx` and the length of its `text` (tests/unit/service/formats/test_jsonl.py)."""

    def prepare(self, row: dict[str, Any]) -> dict[str, Any]:
        return {"idx": np.int64(row["idx"]), "length": np.int64(len(row["text"]))}


def text_length(**kwargs: Any) -> TextLength:
    return TextLength(**kwargs)
