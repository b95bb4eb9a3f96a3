"""`shardstream validate` finds what the reference libraries would trip on, as a real process: it
opens tars through the same format code as the service (the reads themselves are compared with
the references in test_reference_formats.py)."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path

from tests.reference_datasets import write_odd_tars, write_tar

CLI = os.path.join(os.path.dirname(sys.executable), "shardstream")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CLI, "validate", *args], capture_output=True, text=True, timeout=120)


def test_samples_missing_a_field_the_job_names_exit_1_naming_key_and_file(tmp_path: Path) -> None:
    urls = write_odd_tars(str(tmp_path))
    result = run(str(tmp_path), "--format", "webdataset", "--columns", "jpg,cls", "--transform", "image",
                 "--transform-arg", "column=jpg", "--transform-arg", "size=4")
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout.startswith(f"error: SchemaMismatch: 8 sample(s) have no field 'jpg' that columns= names: "
                                    f"'train/a1' of file://{urls[0]}, 'train/' of file://{urls[0]}")
    assert "Traceback" not in result.stderr


def test_a_gzipped_tar_exits_1_saying_why(tmp_path: Path) -> None:
    plain = write_tar(str(tmp_path / "s.tar"), [("k.jpg", b"x"), ("k.cls", b"1")])
    with open(plain, "rb") as f:
        (tmp_path / "s.tar.gz").write_bytes(gzip.compress(f.read()))
    os.remove(plain)
    result = run(str(tmp_path), "--format", "webdataset", "--columns", "cls")
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout.startswith(f"error: UnreadableShard: 'file://{tmp_path}/s.tar.gz' is a gzip-compressed tar")


def test_a_field_webdataset_cannot_decode_is_an_unreadable_unit_naming_sample_and_field(tmp_path: Path) -> None:
    write_tar(str(tmp_path / "s.tar"), [("a.json", b"{}"), ("b.json", b"{broken")])
    result = run(str(tmp_path), "--format", "webdataset", "--full")
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"field 'json' of sample 'b' of file://{tmp_path}/s.tar holds b'{{broken', not JSON" in result.stdout

