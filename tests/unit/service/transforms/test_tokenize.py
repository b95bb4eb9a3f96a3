"""The tokenize transform: ids exactly the tokenizers library's, its arguments and their refusals,
the schema and collate checks, and the tokenizer file read once per process and identified by hash."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from tokenizers import Tokenizer

from shardstream.proto.errors import DatasetChanged, InvalidJobSpec
from shardstream.service.limits import RequestLimits
from shardstream.service.transforms import build_transform, transform_files
from shardstream.service.transforms.job_schema import check_job_schema
from shardstream.service.transforms.tokenize import TokenizeTransform
from shardstream.service.transforms.transform_files import TransformFile, check_pinned, read_file
from tests.text_datasets import TEXTS, bpe_tokenizer, save, wordpiece_tokenizer

BPE_TOKENS = {"bos_token": "<s>", "eos_token": "</s>"}
WORDPIECE_TOKENS = {"bos_token": "[CLS]", "eos_token": "[SEP]"}


@pytest.fixture(scope="module")
def bpe(tmp_path_factory: pytest.TempPathFactory) -> str:
    return save(bpe_tokenizer(), str(tmp_path_factory.mktemp("bpe") / "tokenizer.json"))


@pytest.fixture(scope="module")
def wordpiece(tmp_path_factory: pytest.TempPathFactory) -> str:
    return save(wordpiece_tokenizer(), str(tmp_path_factory.mktemp("wordpiece") / "tokenizer.json"))


def tokenize(path: str, **args: Any) -> TokenizeTransform:
    built = build_transform("tokenize", {"tokenizer": path, **args}, ())
    assert isinstance(built, TokenizeTransform)
    return built


def reference(path: str, text: str, add_special_tokens: bool = False, bos: int | None = None,
              eos: int | None = None, max_length: int | None = None) -> list[int]:
    """What the documentation promises, from the library alone: the tokenizer's ids (its own
    truncation to what BOS/EOS leave of max_length), then BOS and EOS around them."""
    tokenizer = Tokenizer.from_file(path)
    added = (bos is not None) + (eos is not None)
    if max_length is not None:
        tokenizer.enable_truncation(max_length - added)
    ids = tokenizer.encode(text, add_special_tokens=add_special_tokens).ids
    return ([bos] if bos is not None else []) + ids + ([eos] if eos is not None else [])


CONFIGS: list[dict[str, Any]] = [
    {},
    {"add_special_tokens": True},
    {"add_bos": True},
    {"add_eos": True},
    {"add_bos": True, "add_eos": True},
    {"add_bos": True, "add_eos": True, "max_length": 7},
    {"add_eos": True, "max_length": 3},
    {"max_length": 1},
    {"add_special_tokens": True, "max_length": 5},
    {"add_special_tokens": True, "add_eos": True, "max_length": 64},
]


@pytest.mark.parametrize("kind", ["bpe", "wordpiece"])
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: json.dumps(c, sort_keys=True))
def test_ids_are_the_tokenizers_librarys_with_bos_eos_and_truncation_as_documented(
        kind: str, config: dict[str, Any], request: pytest.FixtureRequest) -> None:
    path = request.getfixturevalue(kind)
    named = BPE_TOKENS if kind == "bpe" else WORDPIECE_TOKENS
    transform = tokenize(path, **config, **named)
    plain = Tokenizer.from_file(path)
    bos = plain.token_to_id(named["bos_token"]) if config.get("add_bos") else None
    eos = plain.token_to_id(named["eos_token"]) if config.get("add_eos") else None
    for text in TEXTS:
        got = transform.prepare({"text": text, "idx": 3})
        assert list(got) == ["input_ids"]  # nothing else unless kept
        ids = got["input_ids"]
        assert ids.dtype == np.int64 and ids.ndim == 1
        expected = reference(path, text, config.get("add_special_tokens", False), bos, eos, config.get("max_length"))
        assert ids.tolist() == expected, text
        if "max_length" in config:
            assert len(ids) <= config["max_length"]
    together = transform.prepare_many([{"text": text, "idx": 3} for text in TEXTS])  # the decode loop's call
    assert [sample["input_ids"].tolist() for sample in together] == [transform.prepare({"text": text})["input_ids"]
                                                                     .tolist() for text in TEXTS]
    assert all(list(sample) == ["input_ids"] and sample["input_ids"].dtype == np.int64 for sample in together)


def test_the_long_text_is_cut_and_the_others_are_whole(bpe: str) -> None:
    long_text = TEXTS[-3]
    whole = Tokenizer.from_file(bpe).encode(long_text, add_special_tokens=False).ids
    assert len(whole) > 2000
    assert tokenize(bpe).prepare({"text": long_text})["input_ids"].tolist() == whole
    cut = tokenize(bpe, max_length=100, add_eos=True, eos_token="</s>").prepare({"text": long_text})["input_ids"]
    assert cut.tolist() == [*whole[:99], Tokenizer.from_file(bpe).token_to_id("</s>")]
    assert tokenize(bpe).prepare({"text": ""})["input_ids"].shape == (0,)


def test_the_files_own_truncation_and_padding_are_ignored(bpe: str, tmp_path: Path) -> None:
    padded = Tokenizer.from_file(bpe)
    padded.enable_truncation(2)
    padded.enable_padding(length=50, pad_id=3, pad_token="<pad>")
    path = save(padded, str(tmp_path / "tokenizer.json"))
    text = TEXTS[0]
    assert tokenize(path).prepare({"text": text})["input_ids"].tolist() == reference(bpe, text)


def test_kept_columns_pass_through_and_others_do_not(bpe: str) -> None:
    got = tokenize(bpe, keep=["idx"]).prepare({"text": "the fox", "idx": 7, "url": "x"})
    assert list(got) == ["input_ids", "idx"] and got["idx"] == 7


@pytest.mark.parametrize(("args", "message"), [
    ({"tokenizer": ""}, "tokenize needs tokenizer="),
    ({"tokenizer": "tok/tokenizer.json"}, "tokenizer 'tok/tokenizer.json' must be an absolute path or a URL"),
    ({"column": 3}, "tokenize column must be a column name"),
    ({"add_bos": "yes"}, "add_bos must be true or false"),
    ({"add_special_tokens": 1}, "add_special_tokens must be true or false"),
    ({"max_length": 0}, "max_length must be a positive int"),
    ({"max_length": 2.5}, "max_length must be a positive int"),
    ({"max_length": True}, "max_length must be a positive int"),
    ({"add_bos": True}, "add_bos needs bos_token"),
    ({"add_eos": True, "eos_token": "<eos>"}, r"eos_token '<eos>' is not in the vocabulary of tokenizer file '.*tokenizer\.json'"),
    ({"add_bos": True, "bos_token": "<s>", "add_eos": True, "eos_token": "</s>", "max_length": 2},
     "max_length 2 leaves no room for text"),
    ({"add_special_tokens": True, "max_length": 2}, r"leaves no room for text .* the 2 special tokens"),
    ({"keep": ["text"]}, "keep must list other columns"),
    ({"keep": "idx"}, "keep must list other columns"),
    ({"vocab": 3}, "rejected its arguments"),
    ({"longest": 10**9}, "rejected its arguments"),  # the service's bound, not the job's
    ({"pack": 0}, "pack must be the tokens per packed row, 1 to 1,048,576"),
    ({"pack": True}, "pack must be the tokens per packed row"),
    ({"pack": 2**21}, "pack must be the tokens per packed row"),
    ({"pack": 8, "keep": ["idx"]}, "keep \\['idx'\\] is per document"),
    ({"pack": 8, "pad_id": 1.5}, "pad_id must be a token id"),
    ({"pack": 8, "mask_across_documents": 1}, "mask_across_documents must be true or false"),
    ({"mask_across_documents": True}, "mask_across_documents is for packed rows"),
])
def test_bad_arguments_are_refused_naming_them(bpe: str, args: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidJobSpec, match=message):
        build_transform("tokenize", {"tokenizer": bpe, **args}, ())


def test_max_length_past_the_services_max_seq_len_is_refused(bpe: str) -> None:
    with pytest.raises(InvalidJobSpec, match=r"max_length 11 is above this service's limit of 10 .*max_seq_len"):
        build_transform("tokenize", {"tokenizer": bpe, "max_length": 11}, (), RequestLimits(seq_len=10))


def test_without_max_length_a_text_past_max_seq_len_is_refused_naming_the_setting(bpe: str) -> None:
    transform = build_transform("tokenize", {"tokenizer": bpe}, (), RequestLimits(seq_len=10))
    assert transform is not None
    assert len(transform.prepare({"text": "the quick"})["input_ids"]) <= 10
    with pytest.raises(ValueError, match=r"column 'text' holds a text of \d+ tokens, above this service's "
                                         r"max_seq_len of 10: set transform_args max_length"):
        transform.prepare({"text": TEXTS[0]})


@pytest.mark.parametrize(("value", "said"), [(None, "a null"), (3, "a int"), (b"bytes", "a bytes")])
def test_a_null_or_a_value_that_is_not_a_string_is_an_error_naming_the_column(
        bpe: str, value: object, said: str) -> None:
    with pytest.raises(ValueError, match=f"column 'text' holds {said}, not a string"):
        tokenize(bpe).prepare({"text": value})


def test_a_batch_tokenized_together_fails_only_its_bad_rows_each_with_prepares_error(bpe: str) -> None:
    transform = build_transform("tokenize", {"tokenizer": bpe, "add_eos": True, "eos_token": "</s>"}, (),
                                RequestLimits(seq_len=40))
    assert isinstance(transform, TokenizeTransform)
    rows = [{"text": "the quick"}, {"text": None}, {"text": TEXTS[-3]}, {"text": 7}, {"text": ""}, {"text": "fox"}]
    together = transform.prepare_many(rows)
    assert len(together) == len(rows)
    for row, got in zip(rows, together, strict=True):
        try:
            expected: Any = transform.prepare(dict(row))
        except ValueError as exc:
            expected = exc
        if isinstance(expected, ValueError):
            assert isinstance(got, ValueError) and str(got) == str(expected)
        else:
            assert isinstance(got, dict) and got["input_ids"].tolist() == expected["input_ids"].tolist()
    assert [isinstance(got, ValueError) for got in together] == [False, True, True, True, False, False]


@pytest.mark.parametrize(("content", "message"), [
    (b'{"version": "1.0"}', "does not load as a Hugging Face tokenizer.json"),
    (b"not json at all", "does not load as a Hugging Face tokenizer.json"),
    (b"\xff\xfe", "does not load as a Hugging Face tokenizer.json"),
])
def test_a_tokenizer_file_that_does_not_load_is_refused_naming_it(tmp_path: Path, content: bytes,
                                                                  message: str) -> None:
    path = tmp_path / "broken.json"
    path.write_bytes(content)
    with pytest.raises(InvalidJobSpec, match=f"tokenizer file '{path}' {message}"):
        build_transform("tokenize", {"tokenizer": str(path)}, ())


def test_a_missing_tokenizer_file_or_a_directory_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(InvalidJobSpec, match=f"tokenizer file '{tmp_path}/nope.json' does not exist"):
        build_transform("tokenize", {"tokenizer": str(tmp_path / "nope.json")}, ())
    with pytest.raises(InvalidJobSpec, match=f"tokenizer file '{tmp_path}' is a directory"):
        build_transform("tokenize", {"tokenizer": str(tmp_path)}, ())


def test_a_tokenizer_file_past_the_size_bound_is_refused(bpe: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transform_files, "MAX_FILE_BYTES", 100)
    monkeypatch.setattr(transform_files, "_KEPT", type(transform_files._KEPT)())
    with pytest.raises(InvalidJobSpec, match=r"tokenizer file '.*' is [\d,]+ bytes, above the 100 a transform may read"):
        build_transform("tokenize", {"tokenizer": bpe}, ())


def test_the_schema_check_names_the_column_and_collate_pad_is_required(bpe: str) -> None:
    schema = pa.schema([("text", pa.string()), ("idx", pa.int64()), ("meta", pa.struct([("a", pa.int8())]))])
    transform = tokenize(bpe)
    check_job_schema(schema, transform, "pad")  # other columns are not delivered: their types do not matter
    check_job_schema(schema, transform, "tests.collates:mine")  # a collate of one's own may stack anything
    with pytest.raises(InvalidJobSpec, match="'input_ids' of varying length: use collate='pad'"):
        check_job_schema(schema, transform, "")
    check_job_schema(pa.schema([("text", pa.large_string())]), transform, "pad")
    check_job_schema(pa.schema([("text", pa.dictionary(pa.int32(), pa.string()))]), transform, "pad")
    with pytest.raises(InvalidJobSpec, match=r"tokenize column 'text' not in dataset columns \['body'\]"):
        check_job_schema(pa.schema([("body", pa.string())]), transform, "pad")
    with pytest.raises(InvalidJobSpec, match="tokenize column 'text' must hold strings, has binary"):
        check_job_schema(pa.schema([("text", pa.binary())]), transform, "pad")
    with pytest.raises(InvalidJobSpec, match="keep names 'nope'"):
        check_job_schema(schema, tokenize(bpe, keep=["nope"]), "pad")
    with pytest.raises(InvalidJobSpec, match="column 'meta'"):
        check_job_schema(schema, tokenize(bpe, keep=["meta"]), "pad")
    check_job_schema(schema, tokenize(bpe, keep=["idx"]), "pad")


def test_the_file_is_identified_by_its_content_and_read_once_per_version(bpe: str, tmp_path: Path) -> None:
    path = tmp_path / "tokenizer.json"
    path.write_bytes(Path(bpe).read_bytes())
    first = tokenize(str(path))
    assert read_file(str(path), "tokenizer file") is read_file(str(path), "tokenizer file")  # kept, not read again
    assert first.files == {"tokenizer": TransformFile(str(path), first.cache_identity["tokenizer_sha256"])}
    save(wordpiece_tokenizer(), str(path))  # rewritten in place: another version, another hash
    os.utime(path, (1, 1))
    second = tokenize(str(path))
    assert second.files["tokenizer"].sha256 != first.files["tokenizer"].sha256
    assert second.files["tokenizer"].sha256 == transform_files.hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_decode_actor_reading_another_file_than_the_job_opened_with_refuses_it(bpe: str) -> None:
    transform = tokenize(bpe)
    sha256 = transform.files["tokenizer"].sha256
    check_pinned(transform, {bpe: sha256})
    check_pinned(transform, {})  # a job that pinned nothing (a DecodeJob made in this process)
    with pytest.raises(DatasetChanged, match=f"the tokenizer file '{bpe}' changed after the job opened it "
                                             f"\\(sha256 0000000000000000 then, {sha256[:16]} now\\)"):
        check_pinned(transform, {bpe: "0" * 64})
