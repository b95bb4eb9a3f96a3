"""The examples under examples/formats/ (formats, weights, padding) run against a real service."""

from __future__ import annotations

import subprocess
import sys

import pytest

EXAMPLES = {
    "tokens": ["input_ids torch.int64 [4, 8]", "labels torch.int64 [4, 8]", "124 samples"],
    "webdataset": ["jpg torch.uint8 [4, 3, 32, 32]", "cls torch.int64 [4]", "txt list of 4 str", "20 samples"],
    "imagefolder": ["image torch.uint8 [4, 3, 32, 32]", "label torch.int64 [4]", "15 samples"],
    "manifest": ["image torch.uint8 [4, 3, 32, 32]", "label torch.int64 [4]", "12 samples"],
    "weights": ["label torch.int64 [4]", "40 samples"],
    "collate": ["prompt list of 4 str", "words torch.int64 [4]", "16 samples"],
    "jsonl": ["text list of 4 str", "id torch.int64 [4]", "tokens torch.int64 [4, ", "tokens_lengths torch.int64 [4]",
              "20 samples"],
    "packed_tokens": ["input_ids torch.int64 [4, 16]", "position_ids torch.int64 [4, 16]",
                      "cu_seqlens torch.int32 [4, 17]", "num_documents torch.int64 [4]", "flattened: ", "in 64 tokens"],
    "padded": ["ids torch.int32 [4, ", "ids_lengths torch.int64 [4]", "title list of 4 str", "24 samples"],
}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_format_example_runs(service_address: str, name: str) -> None:
    done = subprocess.run([sys.executable, f"examples/formats/{name}.py", "--address", service_address],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    for expected in EXAMPLES[name]:
        assert expected in done.stdout, done.stdout
    assert "epoch 1, first batch" in done.stdout


def test_llm_example_trains_on_a_packed_mixture_and_resumes(service_address: str) -> None:
    done = subprocess.run([sys.executable, "examples/llm/train_gpt.py", "--address", service_address, "--steps", "40",
                           "--switch-at", "20"], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout
    assert "38 batches per epoch from 600 documents" in lines, lines
    losses = [float(line.split("loss ")[1].split(",")[0]) for line in lines.splitlines() if line.startswith("step ")]
    assert len(losses) == 4 and losses[-1] < losses[0], lines  # it learns
    shares = dict(part.split() for part in lines.split("source shares: ")[1].split(" (")[0].split(", "))
    assert abs(float(shares["prose"]) - 0.6) < 0.02, lines  # 20 steps at 0.7, 20 at 0.5, within a batch's rounding
    assert "padding fraction" in lines and "the next 18 batches are the same: True" in lines, lines
