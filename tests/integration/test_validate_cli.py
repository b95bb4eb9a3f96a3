"""`shardstream validate` as a real process: exit codes, what it prints, --json. No service, no Ray."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from shardstream.service.formats import index_dataset
from tests.datasets import write_images, write_indexed
from tests.formats import _break_tokens, _write_manifest

CLI = os.path.join(os.path.dirname(sys.executable), "shardstream")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CLI, "validate", *args], capture_output=True, text=True, timeout=120)


def test_a_good_dataset_exits_0_with_its_count_and_fingerprint(tmp_path: Path) -> None:
    write_indexed(str(tmp_path), [9, 0, 14, 3])
    result = run(str(tmp_path), "--workers", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    fingerprint = index_dataset((str(tmp_path),)).fingerprint
    assert "samples: 26\n" in result.stdout and f"fingerprint: {fingerprint}\n" in result.stdout
    assert "format: parquet\n" in result.stdout and result.stdout.endswith("OK\n")


def test_corrupt_images_exit_1_naming_each_file_and_row(tmp_path: Path) -> None:
    write_images(str(tmp_path), [10, 14], corrupt=[3, 13, 20])
    result = run(str(tmp_path), "--transform", "image", "--transform-arg", "size=8",
                 "--transform-arg", "mode=center_crop", "--full")
    assert result.returncode == 1, result.stdout + result.stderr
    corrupt = [line for line in result.stdout.splitlines() if line.startswith("corrupt: ")]
    assert [line.split(": UnidentifiedImageError")[0] for line in corrupt] == [
        f"corrupt: sample 3 (row 3 of file://{tmp_path}/img-00000.parquet)",
        f"corrupt: sample 13 (row 3 of file://{tmp_path}/img-00001.parquet)",
        f"corrupt: sample 20 (row 10 of file://{tmp_path}/img-00001.parquet)"]
    assert "checked: 24 of 24 samples" in result.stdout
    assert "FAILED: 3 corrupt sample(s), 0 unreadable unit(s)" in result.stdout


def test_json_with_a_sample_decodes_k(tmp_path: Path) -> None:
    write_indexed(str(tmp_path), [40, 30], row_group_size=8)
    result = run(str(tmp_path), "--sample", "7", "--columns", "idx,x", "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)  # stdout is the one object: logs go to stderr
    assert {"format", "fingerprint", "shards", "samples", "schema", "checked", "corrupt", "unreadable",
            "ok"} <= set(document)
    assert document["checked"] == 7 and document["samples"] == 70 and document["ok"] is True
    assert [c["name"] for c in document["schema"]] == ["idx", "x"]
    assert document["corrupt"] == document["unreadable"] == []


def test_a_token_file_of_a_bad_size_exits_1_naming_it(tmp_path: Path) -> None:
    _break_tokens(str(tmp_path))
    result = run(str(tmp_path), "--format", "tokens", "--format-arg", "seq_len=5", "--format-arg", "dtype=uint16")
    assert result.returncode == 1
    assert result.stdout.startswith(f"error: UnreadableShard: token file 'file://{tmp_path}/part-9.bin' has 3 "
                                    "bytes of tokens, not a multiple of uint16's 2")
    assert "Traceback" not in result.stderr


def test_a_manifests_missing_file_exits_1_naming_its_url(tmp_path: Path) -> None:
    _write_manifest(str(tmp_path), missing=4)
    result = run(f"{tmp_path}/manifest.csv", "--format", "manifest", "--columns", "image,idx",
                 "--transform", "image", "--transform-arg", "column=image", "--transform-arg", "size=4")
    assert result.returncode == 1, result.stdout + result.stderr
    url = f"file://{tmp_path}/files/004.png"
    assert f"corrupt: sample 4 (file {url}): cannot be read: {url} does not exist\n" in result.stdout


def test_usage_errors_exit_2() -> None:
    for args in (["x", "--sample", "3", "--full"], ["x", "--sample", "0"], ["x", "--format-arg", "seq_len"], []):
        result = run(*args)
        assert result.returncode == 2, (args, result.stderr)
        assert "usage: shardstream validate" in result.stderr


def test_an_integer_null_exits_1_naming_file_column_and_row_and_passes_with_nulls_mask(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"idx": pa.array([0, 1, 2, None, 4], pa.int64())}), tmp_path / "a.parquet",
                   row_group_size=2)
    result = run(str(tmp_path))
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"column 'idx' (int64) holds a null at row 3 of file://{tmp_path}/a.parquet" in result.stdout
    masked = run(str(tmp_path), "--nulls", "mask")
    assert masked.returncode == 0, masked.stdout + masked.stderr
