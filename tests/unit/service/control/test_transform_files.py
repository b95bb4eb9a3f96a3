"""A transform's own file (the tokenize transform's tokenizer.json) at job open: held to the dataset
rules before it is read, refused by name when it does not load, pinned for the decode actors, and
recorded in the manifest so a resume with another tokenizer is refused naming it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from shardstream.client.manifest_diff import refusals
from shardstream.proto.errors import DatasetNotAllowed, InvalidJobSpec
from shardstream.proto.job_options import JobOptions
from shardstream.service.control.access import DatasetAccess
from shardstream.service.control.jobs import JobRegistry
from shardstream.service.limits import RequestLimits
from tests.text_datasets import TEXTS, bpe_tokenizer, save, wordpiece_tokenizer, write_texts


def spec(data: str, tokenizer: str, **overrides: Any) -> JobOptions:
    values: dict[str, Any] = dict(dataset=(data,), batch_size=2, world_size=1, transform="tokenize",
                                  transform_args={"tokenizer": tokenizer}, collate="pad")
    values.update(overrides)
    return JobOptions(**values)


@pytest.fixture
def allowed(tmp_path: Path) -> Path:
    """A directory the service may read: the dataset and a tokenizer under it."""
    root = tmp_path / "allowed"
    write_texts(str(root / "data"), TEXTS)
    save(bpe_tokenizer(), str(root / "tokenizer.json"))
    return root


def test_a_tokenizer_outside_the_allowed_prefixes_is_refused_before_it_is_read(allowed: Path, tmp_path: Path) -> None:
    registry = JobRegistry((), DatasetAccess((str(allowed),)))
    outside = tmp_path / "elsewhere" / "tokenizer.json"  # does not exist: refused before anything is read
    with pytest.raises(DatasetNotAllowed, match=rf"transform 'tokenize' would read its tokenizer file "
                                                rf"'{outside}', which is held to the dataset rules: dataset "
                                                rf"'{outside}' is outside the prefixes"):
        registry.open("outside", spec(str(allowed / "data"), str(outside)), 0)
    link = allowed / "link.json"
    link.symlink_to("/etc/hostname")  # a link under the prefix to a file outside it
    with pytest.raises(DatasetNotAllowed, match="outside the prefixes"):
        registry.open("link", spec(str(allowed / "data"), str(link)), 0)
    with pytest.raises(InvalidJobSpec, match="does not read datasets over http://"):
        registry.open("web", spec(str(allowed / "data"), "http://127.0.0.1:9/tokenizer.json"), 0)
    registry.open("inside", spec(str(allowed / "data"), str(allowed / "tokenizer.json")), 0)


def test_the_callers_own_prefixes_apply_to_the_tokenizer_too(allowed: Path) -> None:
    def only_data(url: str) -> None:  # a tokens file's identity that may read the data alone
        if not url.startswith(str(allowed / "data")):
            raise DatasetNotAllowed(f"dataset {url!r} is not this identity's")

    with pytest.raises(DatasetNotAllowed, match=r"tokenizer file .* is not this identity's"):
        JobRegistry(()).open("mine", spec(str(allowed / "data"), str(allowed / "tokenizer.json")), 0, allow=only_data)


def test_a_tokenizer_that_does_not_load_or_a_job_without_collate_pad_is_refused_at_open(allowed: Path) -> None:
    broken = allowed / "broken.json"
    broken.write_text('{"model": {"type": "Nope"}}')
    registry = JobRegistry(())
    with pytest.raises(InvalidJobSpec, match=f"tokenizer file '{broken}' does not load as a Hugging Face "
                                             "tokenizer.json"):
        registry.open("broken", spec(str(allowed / "data"), str(broken)), 0)
    with pytest.raises(InvalidJobSpec, match=r"tokenizer file '.*missing\.json' does not exist"):
        registry.open("missing", spec(str(allowed / "data"), str(allowed / "missing.json")), 0)
    with pytest.raises(InvalidJobSpec, match="'input_ids' of varying length: use collate='pad'"):
        registry.open("stacked", spec(str(allowed / "data"), str(allowed / "tokenizer.json"), collate=""), 0)


def test_the_job_pins_the_tokenizers_hash_for_its_decoders_and_records_it_in_the_manifest(allowed: Path) -> None:
    path = str(allowed / "tokenizer.json")
    registry = JobRegistry((), limits=RequestLimits(seq_len=4096))
    job = registry.open("pinned", spec(str(allowed / "data"), path), 0)
    sha256 = job.manifest["pipeline"]["files"]["tokenizer"]["sha256"]
    assert job.manifest["pipeline"]["files"] == {"tokenizer": {"url": path, "sha256": sha256}}
    assert job.decode.transform_files == {path: sha256} and len(sha256) == 64
    assert job.decode.limits.seq_len == 4096  # what its decoders bound a text without max_length by
    assert "tokenizers" in job.manifest["service"]
    plain = registry.open("plain", JobOptions(dataset=(str(allowed / "data"),), batch_size=2, world_size=1,
                                              columns=("idx",)), 0)
    assert "files" not in plain.manifest["pipeline"] and plain.decode.transform_files == {}


def test_a_resume_with_another_tokenizer_under_the_same_path_is_refused_naming_it(allowed: Path) -> None:
    path = allowed / "tokenizer.json"
    before = JobRegistry(()).open("run", spec(str(allowed / "data"), str(path)), 0).manifest
    save(wordpiece_tokenizer(), str(path))
    os.utime(path, (1, 1))
    after = JobRegistry(()).open("run", spec(str(allowed / "data"), str(path)), 0).manifest
    assert before["pipeline"]["hash"] != after["pipeline"]["hash"]
    was, now = before["pipeline"]["files"]["tokenizer"]["sha256"], after["pipeline"]["files"]["tokenizer"]["sha256"]
    assert refusals(before, after) == [f"the transform's tokenizer file changed ('{path}' sha256 {was[:16]} -> "
                                       f"'{path}' sha256 {now[:16]})"]
