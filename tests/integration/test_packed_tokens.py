"""Packed token windows through a real service: a rank's batches are DistributedSampler's windows,
each with its documents' positions, boundaries and masked labels, as the definition gives them
(tests/unit/service/formats/test_token_documents.py), and the boundaries a training step takes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from shardstream.client import FormatOptions, RemoteLoader
from shardstream.client.packing import varlen_boundaries
from tests.datasets import oracle_batches
from tests.unit.service.formats.test_token_documents import EOS, documents_stream, expected

SEQ_LEN = 16


@pytest.fixture(scope="module")
def stream(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, np.ndarray]:
    directory = tmp_path_factory.mktemp("packed")
    tokens = documents_stream(list(np.random.default_rng(7).integers(0, 40, 60)), seed=7)
    half = len(tokens) // 2
    tokens[:half].tofile(directory / "part-0.bin")
    tokens[half:].tofile(directory / "part-1.bin")
    return str(directory), tokens


def test_a_ranks_windows_carry_their_documents(service_address: str, stream: tuple[str, np.ndarray]) -> None:
    directory, tokens = stream
    n = (len(tokens) - 1) // SEQ_LEN
    with RemoteLoader(service_address, dataset=directory, batch_size=4, seed=2, world_size=2, rank=1,
                      job_name="packed-tokens", format_options=FormatOptions(
                          format="tokens", seq_len=SEQ_LEN, dtype="uint16",
                          format_args={"eos_id": EOS, "mask_across_documents": True})) as loader:
        loader.set_epoch(1)
        batches = list(loader)
    wanted = oracle_batches(n, 2, 1, 4, True, 2, False, 1)
    assert len(batches) == len(wanted)
    for batch, indices in zip(batches, wanted, strict=True):
        assert batch["cu_seqlens"].dtype == torch.int32 and batch["cu_seqlens"].shape == (len(indices), SEQ_LEN + 1)
        windows = [tokens[i * SEQ_LEN: i * SEQ_LEN + SEQ_LEN + 1].astype(int).tolist() for i in indices]
        rows = [expected(w, mask=True) for w in windows]
        for key in ("input_ids", "labels", "position_ids", "cu_seqlens", "num_documents"):
            assert batch[key].tolist() == [row[key] for row in rows], key
        flat, longest = varlen_boundaries(batch["cu_seqlens"], batch["num_documents"])
        assert int(flat[-1]) == len(indices) * SEQ_LEN and 0 < longest <= SEQ_LEN
