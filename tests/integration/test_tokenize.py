"""The tokenize transform through a real service: each batch the tokenizers library's ids in
DataLoader + DistributedSampler's order, a second epoch served from the prepared-sample cache, the
job refused at open by name (no collate='pad', a tokenizer that does not load), and a resume with
another tokenizer refused naming it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tokenizers import Tokenizer

from shardstream.client import CheckpointMismatch, InvalidJobSpec, RemoteLoader
from shardstream.service.transforms.token_packing import pack_documents
from tests.datasets import oracle_batches
from tests.integration.test_local_copy import _reads
from tests.text_datasets import TEXTS, bpe_tokenizer, save, wordpiece_tokenizer, write_texts

N = len(TEXTS)


@pytest.fixture
def texts(tmp_path: Path) -> tuple[str, str]:
    """(the dataset, its tokenizer.json)."""
    write_texts(str(tmp_path / "data"), TEXTS, row_group_size=3)
    return str(tmp_path / "data"), save(bpe_tokenizer(), str(tmp_path / "tokenizer.json"))


def loader(address: str, data: str, args: dict[str, Any], job: str, **kwargs: Any) -> RemoteLoader:
    options: dict[str, Any] = {"batch_size": 4, "shuffle": True, "seed": 3, "world_size": 1, "rank": 0,
                               "collate": "pad", "pad_value": -1, **kwargs}
    return RemoteLoader(address, dataset=data, transform="tokenize", transform_args=args, job_name=job, **options)


def test_batches_are_the_reference_ids_in_sampler_order_and_a_second_epoch_is_not_tokenized_again(
        service_address: str, texts: tuple[str, str]) -> None:
    data, path = texts
    args = {"tokenizer": path, "add_eos": True, "eos_token": "</s>", "max_length": 64, "keep": ["idx"]}
    reference = Tokenizer.from_file(path)
    reference.enable_truncation(63)
    eos = reference.token_to_id("</s>")
    before = _reads(service_address)
    with loader(service_address, data, args, "tokenize-epochs") as it:
        for epoch in (0, 1):
            it.set_epoch(epoch)
            batches = list(it)
            assert [b["idx"].tolist() for b in batches] == oracle_batches(N, 1, 0, 4, True, 3, False, epoch)
            for batch in batches:
                assert list(batch) == ["input_ids", "input_ids_lengths", "idx"]
                for row, index in enumerate(batch["idx"].tolist()):
                    want = [*reference.encode(TEXTS[index], add_special_tokens=False).ids, eos]
                    length = int(batch["input_ids_lengths"][row])
                    assert batch["input_ids"][row, :length].tolist() == want
                    assert (batch["input_ids"][row, length:] == -1).all()
            if epoch == 0:
                cold = _reads(service_address)
    warm = _reads(service_address)
    assert cold.prepared_misses - before.prepared_misses == N  # tokenized once, in epoch 0
    assert warm.prepared_misses == cold.prepared_misses  # epoch 1: nothing tokenized again
    assert (warm.prepared_memory_hits + warm.prepared_disk_hits) - (cold.prepared_memory_hits
                                                                    + cold.prepared_disk_hits) == N


def test_a_job_without_collate_pad_or_with_a_tokenizer_that_does_not_load_is_refused_at_open(
        service_address: str, texts: tuple[str, str], tmp_path: Path) -> None:
    data, path = texts
    with pytest.raises(InvalidJobSpec, match="'input_ids' of varying length: use collate='pad'"), \
            loader(service_address, data, {"tokenizer": path}, "tokenize-stacked", collate="") as it:
        next(iter(it))
    broken = tmp_path / "broken.json"
    broken.write_text("{}")
    with pytest.raises(InvalidJobSpec, match=f"tokenizer file '{broken}' does not load"), \
            loader(service_address, data, {"tokenizer": str(broken)}, "tokenize-broken") as it:
        next(iter(it))


def test_a_resume_with_a_rewritten_tokenizer_is_refused_naming_the_file(
        service_address: str, texts: tuple[str, str]) -> None:
    data, path = texts
    with loader(service_address, data, {"tokenizer": path}, "tokenize-resume-1") as first:
        next(iter(first))
        state = first.state_dict()
    save(wordpiece_tokenizer(), path)
    os.utime(path, (1, 1))
    with loader(service_address, data, {"tokenizer": path}, "tokenize-resume-2") as again, \
            pytest.raises(CheckpointMismatch, match=rf"the transform's tokenizer file changed \('{path}' sha256 "):
        again.load_state_dict(state)


def test_packed_rows_are_the_reference_ids_of_the_batch_packed_in_sampler_order(
        service_address: str, texts: tuple[str, str]) -> None:
    data, path = texts
    args = {"tokenizer": path, "add_eos": True, "eos_token": "</s>", "max_length": 64, "pack": 16,
            "mask_across_documents": True, "pad_id": 3}
    reference = Tokenizer.from_file(path)
    reference.enable_truncation(63)
    eos = reference.token_to_id("</s>")
    ids = [np.array([*reference.encode(text, add_special_tokens=False).ids, eos]) for text in TEXTS]
    with loader(service_address, data, args, "tokenize-packed", collate="") as it:
        it.set_epoch(2)
        batches = list(it)
    wanted = oracle_batches(N, 1, 0, 4, True, 3, False, 2)
    assert len(batches) == len(wanted)
    for batch, indices in zip(batches, wanted, strict=True):
        packed = pack_documents([ids[i] for i in indices], 16, 3, mask_across_documents=True)
        assert sorted(batch) == sorted(packed)
        for key, value in packed.items():
            assert batch[key].numpy().tolist() == value.tolist(), key
    with pytest.raises(InvalidJobSpec, match="collates its batches itself"), \
            loader(service_address, data, args, "tokenize-packed-pad") as it:
        next(iter(it))
