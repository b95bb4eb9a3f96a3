"""`shardstream validate` below the command line: real datasets in tmp_path, the service's code."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shardstream.service.cli.validate import (
    ValidationReport,
    parse_option,
    report_json,
    report_text,
    sample_indices,
    validate,
)
from shardstream.service.formats import index_dataset
from tests.datasets import write_images, write_indexed
from tests.formats import CASES, FormatCase, _write_manifest

IMAGE = {"size": 8, "mode": "center_crop"}


def check(dataset: str, **kwargs: Any) -> ValidationReport:
    return validate((dataset,), progress=False, workers=2, **kwargs)


def options(case: FormatCase) -> dict[str, Any]:
    """A conformance case's RemoteLoader options as validate's."""
    o = case.options
    format_args = {key: o[key] for key in ("seq_len", "dtype") if key in o}
    return {"format": o.get("format", ""), "format_args": format_args, "transform": o.get("transform", ""),
            "transform_args": o.get("transform_args", {}), "columns": tuple(o.get("columns", ())),
            "collate": o.get("collate", "")}


def test_a_good_parquet_dataset_passes_with_the_jobs_fingerprint(tmp_path: Path) -> None:
    write_indexed(str(tmp_path), [9, 0, 14, 3])
    report = check(str(tmp_path), sample=None)
    index = index_dataset((str(tmp_path),))
    assert report.ok and report.error is None
    assert (report.samples, report.checked, report.shards) == (26, 26, 4)
    assert report.fingerprint == index.fingerprint
    assert report.units_read == report.units == len(index.row_group_rows)  # --full: every unit, empty ones too
    assert report.schema == [("idx", "int64"), ("x", "fixed_size_list<element: float>[3]"), ("y", "int32")]
    text = report_text(report)
    assert "samples: 26\n" in text and f"fingerprint: {index.fingerprint}\n" in text and text.endswith("OK\n")


def test_full_names_every_corrupt_image_by_file_and_row(tmp_path: Path) -> None:
    write_images(str(tmp_path), [10, 14], corrupt=[3, 13, 20])
    report = check(str(tmp_path), transform="image", transform_args=IMAGE, sample=None)
    assert not report.ok and report.checked == 24
    assert [(b.index, b.where) for b in report.corrupt] == [
        (3, f"row 3 of file://{tmp_path}/img-00000.parquet"),
        (13, f"row 3 of file://{tmp_path}/img-00001.parquet"),
        (20, f"row 10 of file://{tmp_path}/img-00001.parquet")]
    assert all(b.error.startswith("UnidentifiedImageError: cannot identify image file") for b in report.corrupt)
    assert f"corrupt: sample 13 (row 3 of file://{tmp_path}/img-00001.parquet): UnidentifiedImageError" \
        in report_text(report)


def test_sample_decodes_k_samples_and_opens_every_shard(tmp_path: Path) -> None:
    write_images(str(tmp_path), [10, 14, 40], corrupt=range(64))  # every image broken: all checked are found
    report = check(str(tmp_path), transform="image", transform_args=IMAGE, sample=5)
    chosen = sample_indices(64, 5)
    assert report.checked == 5 and [b.index for b in report.corrupt] == chosen.tolist()
    # Read: the units (row groups of 8) those 5 lie in, and each shard's first; not the other units.
    starts = [0, 10, 24]

    def unit_of(i: int) -> tuple[int, int]:
        shard = max(s for s in range(3) if i >= starts[s])
        return shard, (i - starts[shard]) // 8

    expected = {(0, 0), (1, 0), (2, 0)} | {unit_of(i) for i in chosen.tolist()}
    assert report.units_read == len(expected) < report.units == 9
    again = check(str(tmp_path), transform="image", transform_args=IMAGE, sample=5)
    assert [b.index for b in again.corrupt] == [b.index for b in report.corrupt]  # the same samples every run


def test_sample_indices_are_spread_evenly_and_fixed() -> None:
    picked = sample_indices(1000, 10)
    assert len(picked) == 10 and (picked // 100 == np.arange(10)).all()  # one in each tenth
    assert (picked == sample_indices(1000, 10)).all() and not (picked == sample_indices(1000, 10, seed=1)).all()
    assert sample_indices(7, 64).tolist() == list(range(7))
    assert sorted(set(sample_indices(65, 64).tolist())) == sample_indices(65, 64).tolist()


@pytest.mark.parametrize("case", CASES, ids=str)
def test_every_format_passes_and_its_broken_variant_is_named(tmp_path: Path, case: FormatCase) -> None:
    count = case.write(str(tmp_path / "good"))
    report = check(str(tmp_path / "good"), sample=None, **options(case))
    assert report.ok, report_text(report)
    assert report.samples == report.checked == count and report.format == case.name
    pattern = case.break_it(str(tmp_path / "broken"))
    broken = check(str(tmp_path / "broken"), sample=None, **options(case))
    assert not broken.ok
    # What the service says: refused at open, or (a manifest's missing file) one sample's error.
    said = broken.error or "\n".join(f"sample {b.index} ({b.where}) {b.error}" for b in broken.corrupt)
    assert re.search(pattern, said), said
    if case.error == "CorruptSample":
        assert broken.error is None and broken.checked == count
    else:
        assert broken.error is not None and broken.error.startswith(f"{case.error}: ")


def test_a_token_file_of_a_bad_size_is_refused_naming_it(tmp_path: Path) -> None:
    case = next(c for c in CASES if c.name == "tokens")
    case.break_it(str(tmp_path))
    report = check(str(tmp_path), **options(case))
    assert report.error is not None and "part-9.bin" in report.error and "not a multiple of uint16" in report.error
    assert not report.ok and report.checked == 0
    text = report_text(report)
    assert text.startswith("error: UnreadableShard: token file ") and "FAILED" in text


def test_a_manifests_missing_file_is_a_corrupt_sample_named_by_url(tmp_path: Path) -> None:
    _write_manifest(str(tmp_path), missing=4)
    report = check(str(tmp_path / "manifest.csv"), format="manifest", columns=("image", "idx"),
                   transform="image", transform_args={**IMAGE, "column": "image"})  # bytes go to "image"
    assert report.checked == 21  # fewer samples than asked: all of them
    [bad] = report.corrupt
    url = f"file://{tmp_path}/files/004.png"
    assert (bad.index, bad.where) == (4, f"file {url}") and bad.error == f"cannot be read: {url} does not exist"


def test_an_unreadable_row_group_is_listed_and_the_rest_still_checked(tmp_path: Path) -> None:
    [path] = write_indexed(str(tmp_path), [12])  # row groups of 4
    offset = pq.ParquetFile(path).metadata.row_group(1).column(0).data_page_offset
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(b"\xff" * 16)  # row group 1's first page header
    report = check(str(tmp_path), sample=None)
    [bad] = report.unreadable
    assert (bad.shard, bad.unit) == (f"file://{path}", 1) and bad.error.startswith("UnreadableShard: ")
    assert "\n" not in bad.error
    assert report.checked == 8 and report.units_read == 2 and not report.corrupt and not report.ok


def test_without_a_transform_an_integer_null_is_refused_at_open_naming_file_column_and_row(
        tmp_path: Path) -> None:
    pq.write_table(pa.table({"idx": pa.array([0, 1, None, 3, 4, None], pa.int64())}), tmp_path / "a.parquet",
                   row_group_size=4)
    report = check(str(tmp_path), sample=None)
    assert not report.ok and report.error is not None and report.error.startswith("InvalidJobSpec: ")
    assert f"column 'idx' (int64) holds a null at row 2 of file://{tmp_path}/a.parquet" in report.error
    masked = validate((str(tmp_path),), nulls="mask", sample=None, workers=1, progress=False)
    assert masked.ok and masked.checked == 6


def test_without_statistics_a_null_is_named_by_row(tmp_path: Path) -> None:
    """A footer that counts no nulls says nothing at open: the batch holding one is refused."""
    pq.write_table(pa.table({"idx": pa.array([0, 1, None, 3, 4, None], pa.int64())}), tmp_path / "a.parquet",
                   row_group_size=4, write_statistics=False)
    report = check(str(tmp_path), sample=None)
    assert [(b.index, b.where) for b in report.corrupt] == [(2, f"row 2 of file://{tmp_path}/a.parquet"),
                                                         (5, f"row 5 of file://{tmp_path}/a.parquet")]
    assert all("column 'idx' holds a null" in b.error for b in report.corrupt) and report.checked == 6


class Ragged:
    """A user transform whose samples do not all stack: every 7th is longer."""

    def prepare(self, row: dict[str, Any]) -> dict[str, Any]:
        return {"v": np.zeros(4 if row["idx"] % 7 == 0 else 3, np.float32)}


def ragged() -> Ragged:
    return Ragged()


def test_samples_that_would_not_stack_into_a_batch_are_named(tmp_path: Path) -> None:
    write_indexed(str(tmp_path), [20])
    report = check(str(tmp_path), transform=f"{__name__}:ragged", sample=None)  # its own module allowed
    assert [b.index for b in report.corrupt] == [0, 7, 14]
    assert report.corrupt[0].error == ("does not stack into a batch with the others: it has {v: [4]} where "
                                       "17 sample(s) have {v: [3]}")


@pytest.mark.parametrize(("kwargs", "error"), [
    ({"transform": "image", "transform_args": {"column": "nope"}}, "InvalidJobSpec: image column 'nope' not in"),
    ({"columns": ("idx", "zz")}, "InvalidJobSpec: column(s) ['zz'] not in"),
    ({"transform": "no_such_module:make"}, "UnknownTransform: transform module 'no_such_module'"),
    ({"format": "tokens"}, "InvalidJobSpec: format 'tokens' needs seq_len=L"),
])
def test_what_opening_a_job_refuses_is_one_error(tmp_path: Path, kwargs: dict[str, Any], error: str) -> None:
    write_indexed(str(tmp_path), [5])
    report = check(str(tmp_path), **kwargs)
    assert report.error is not None and report.error.startswith(error), report.error
    assert not report.ok and report.checked == 0


def test_json_has_every_key(tmp_path: Path) -> None:
    write_images(str(tmp_path), [10], corrupt=[2])
    report = check(str(tmp_path), transform="image", transform_args=IMAGE, sample=None)
    document = json.loads(report_json(report))
    assert {"format", "fingerprint", "shards", "samples", "schema", "checked", "corrupt", "unreadable",
            "ok"} <= set(document)
    assert document["ok"] is False and document["checked"] == 10 and document["samples"] == 10
    assert document["schema"][0] == {"name": "image", "type": "binary"}
    assert document["corrupt"] == [{"index": 2, "where": f"row 2 of file://{tmp_path}/img-00000.parquet",
                                    "error": report.corrupt[0].error}]
    assert "error" not in document
    assert json.loads(report_json(check(str(tmp_path / "none"))))["error"].startswith("DatasetNotFound: ")


def test_command_line_options_parse_as_json_else_strings() -> None:
    assert parse_option("seq_len=1024") == ("seq_len", 1024)
    assert parse_option("flip=false") == ("flip", False)
    assert parse_option("size=[8, 6]") == ("size", [8, 6])
    assert parse_option("dtype=uint16") == ("dtype", "uint16")
    assert parse_option("column=a=b") == ("column", "a=b")
    for bad in ("nokey", "=3"):
        with pytest.raises(ValueError, match="KEY=VALUE"):
            parse_option(bad)


def test_a_padded_job_validates_its_list_columns(tmp_path: Path) -> None:
    """A list column is refused unless the job pads it; with collate='pad' it validates."""
    pq.write_table(pa.table({"ids": pa.array([[1, 2], [3], []], pa.list_(pa.int32())), "caption": ["a", "b", "c"]}),
                   tmp_path / "docs.parquet")
    refused = validate((str(tmp_path),), sample=None, workers=1, progress=False)
    assert not refused.ok and "collate='pad'" in (refused.error or "")
    padded = validate((str(tmp_path),), collate="pad", sample=None, workers=1, progress=False)
    assert padded.ok and padded.checked == 3
