"""JSON Lines below the service: each sample is json.loads of its line, blank lines are none, units
cut anywhere read the same, bad lines are corrupt samples named by line, bad files refused by name."""

from __future__ import annotations

import bz2
import gzip
import io
import json
import math
import os
import tempfile
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardstream.proto.errors import (
    CorruptSample,
    DatasetChanged,
    DatasetNotFound,
    InvalidJobSpec,
    SchemaMismatch,
    UnreadableShard,
)
from shardstream.proto.v1 import loader_pb2 as pb
from shardstream.service.control.spec import read_spec
from shardstream.service.dataset import UNREADABLE_COLUMN, DatasetIndex
from shardstream.service.formats import get_format, index_dataset, job_format_args, jsonl_lines
from shardstream.service.formats import jsonl as jsonl_format
from shardstream.service.limits import DEFAULT_LIMITS, RequestLimits
from shardstream.service.node.batching import decode_batch
from shardstream.service.node.local_copy import RowGroupKey
from shardstream.service.node.read_counters import SharedReadCounters
from shardstream.service.node.storage_reader import StorageReader
from shardstream.service.node_messages import DecodeJob
from shardstream.service.transforms import build_transform
from tests.datasets import memory_reader


def write(path: Path, content: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    return path


def open_jsonl(*paths: Path | str, columns: tuple[str, ...] = (), **args: Any) -> DatasetIndex:
    return index_dataset(tuple(str(p) for p in paths), columns, format="jsonl", format_args=args)


def read_rows(index: DatasetIndex, columns: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    """Every sample as read_unit gives it, in global order (the unreadable marker included)."""
    storage = StorageReader(SharedReadCounters())
    fmt = get_format("jsonl")
    tables = [fmt.read_unit(shard, unit, columns, storage)
              for shard in index.shards for unit in range(len(shard.row_group_rows))]
    return pa.concat_tables(tables).to_pylist() if tables else []


def reference(lines: list[str], names: list[str]) -> list[dict[str, Any]]:
    """What a user compares with: json.loads of each non-blank line, the schema's keys of it."""
    found = []
    for line in lines:
        if line.strip(" \t\r"):
            value = json.loads(line)
            found.append({name: value.get(name) for name in names})
    return found


def same(a: Any, b: Any) -> bool:
    """Equal, NaN equal to NaN, and of the same type (1 is not 1.0, True is not 1, -0.0 is not 0.0)."""
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def without_marker(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    assert all(row[UNREADABLE_COLUMN] is None for row in rows), [r[UNREADABLE_COLUMN] for r in rows]
    return [{k: v for k, v in row.items() if k != UNREADABLE_COLUMN} for row in rows]


# -- values ---------------------------------------------------------------------------------------

EDGE_LINES = [
    '{"text": "plain", "n": 1, "x": 0.5, "ok": true, "ids": [1, 2, 3], "grid": [[1], [2, 3]]}',
    '{"text": "h\\u00e9llo w\\u00f6rld \\u4e2d\\u6587 \\ud83d\\ude00", "n": -9223372036854775808, "x": -0.0}',
    '{"text": "raw é 中文 😀 \u2028 line separator and \u0085 NEL inside a string", "n": 9223372036854775807}',
    '{"text": "escapes \\" \\\\ \\/ \\b \\f \\n \\r \\t \\u0000 end", "x": 1e308, "ok": false}',
    '{"text": "", "x": 1.5e-7, "ids": [], "grid": []}',
    '{"n": 1, "n": 2, "text": "a duplicated key: json.loads keeps the last"}',
    '{"x": NaN, "text": "non-standard numbers json.loads accepts"}',
    '{"x": Infinity}',
    '{"x": -Infinity, "ids": [-1, null, 4]}',
    '   {"text": "leading and trailing whitespace", "x": 2E2}   ',
    '{"text": null, "n": null, "x": null, "ok": null, "ids": null, "grid": null}',
    '{}',
    '{"text": "a key outside the schema is not read", "unknown": {"deep": [1, {"x": 2}]}}',
]


def test_every_value_is_json_loads_of_its_line(tmp_path: Path) -> None:
    schema = {"text": "string", "n": "int64", "x": "float64", "ok": "bool", "ids": "list<int64>",
              "grid": "list<list<int64>>"}
    write(tmp_path / "a.jsonl", "\n".join(EDGE_LINES) + "\n")
    index = open_jsonl(tmp_path, schema=schema)
    assert index.num_rows == len(EDGE_LINES)
    rows = without_marker(read_rows(index))
    expected = reference(EDGE_LINES, list(schema))
    for number, (row, want) in enumerate(zip(rows, expected, strict=True), start=1):
        assert same(row, want), (number, row, want)


def test_the_schema_is_inferred_from_the_first_unit_in_the_order_keys_appear(tmp_path: Path) -> None:
    lines = ['{"b": 1, "a": "x"}', '{"a": "y", "c": [1, 2], "d": 3}', '{"d": 2.5, "e": [[]], "f": true}',
             '{"e": [[1.5]], "b": null}']
    write(tmp_path / "a.jsonl", "\n".join(lines))
    index = open_jsonl(tmp_path)
    assert [(f.name, str(f.type)) for f in index.schema] == [
        ("b", "int64"), ("a", "string"), ("c", "list<item: int64>"), ("d", "double"),
        ("e", "list<item: list<item: double>>"), ("f", "bool")]
    rows = without_marker(read_rows(index))
    assert rows[1]["d"] == 3.0 and isinstance(rows[1]["d"], float)  # integers of a float column: exact floats
    assert rows == [{n: json.loads(line).get(n) for n in index.schema.names} for line in lines]
    assert index.shards[0].layout.source == f"inferred from lines 1..4 of file://{tmp_path}/a.jsonl"
    selected = open_jsonl(tmp_path, columns=("f", "a"))
    assert selected.schema.names == ["f", "a"]
    assert read_rows(selected)[2] == {"f": True, "a": None, UNREADABLE_COLUMN: None}


@pytest.mark.parametrize(("lines", "error", "message"), [
    (['{"a": 1}', '{"a": "x"}'], SchemaMismatch,
     r"column 'a' holds int64 at line 1 of .*a\.jsonl but string at line 2 .*declare its type"),
    (['{"a": [1]}', '{"a": [true]}'], SchemaMismatch, r"list<int64> at line 1 .* list<bool> at line 2"),
    (['{"a": null}', '{"b": 1, "a": null}'], SchemaMismatch, r"column 'a' is null on every line of lines 1\.\.2"),
    (['{"a": []}', '{"a": [[]]}'], SchemaMismatch, "column 'a' is null or empty lists on every line"),
    (['{"meta": {"source": "web"}}'], UnreadableShard,
     r"column 'meta' holds a JSON object \(\{\"source\": \"web\"\}\).* at line 1 .*leave it out with columns"),
    (['{"id": 18446744073709551615}'], UnreadableShard, "an integer beyond int64 at line 1"),
    (['{"__unreadable__": 1}'], UnreadableShard, "a column of shardstream's own"),
    (['[', '  {"a": 1},', ']'], UnreadableShard, r"no line of lines 1\.\.3 of .* is a JSON object .*is .* JSON Lines"),
])
def test_an_uninferable_schema_is_refused_naming_column_and_lines(
        tmp_path: Path, lines: list[str], error: type[Exception], message: str) -> None:
    write(tmp_path / "a.jsonl", "\n".join(lines) + "\n")
    with pytest.raises(error, match=message):
        open_jsonl(tmp_path)


def test_columns_leave_out_what_the_format_cannot_carry(tmp_path: Path) -> None:
    """The Pile's layout: text, and a meta object no column type carries."""
    write(tmp_path / "a.jsonl", '{"text": "t0", "meta": {"pile_set_name": "Pile-CC"}}\n{"text": "t1", "meta": {}}\n')
    index = open_jsonl(tmp_path, columns=("text",))
    assert without_marker(read_rows(index)) == [{"text": "t0"}, {"text": "t1"}]
    with pytest.raises(InvalidJobSpec, match=r"column\(s\) \['txt'\] are on no line of lines 1\.\.2"):
        open_jsonl(tmp_path, columns=("txt",))


def test_a_mixed_column_is_read_once_declared_the_rest_corrupt_samples(tmp_path: Path) -> None:
    write(tmp_path / "a.jsonl", '{"a": 1}\n{"a": "x"}\n{"a": 2.5}\n{"a": true}\n{"a": 9007199254740993}\n')
    index = open_jsonl(tmp_path, schema={"a": "float64"})
    rows = read_rows(index)
    assert [r["a"] for r in rows] == [1.0, None, 2.5, None, None]
    marks = [r[UNREADABLE_COLUMN] for r in rows]
    assert marks[0] is None and marks[2] is None
    assert marks[1].startswith("line 2: key 'a' holds a string (\"x\") where the column is float64")
    assert "given in format_args schema" in marks[1]
    assert "holds a bool (true) where the column is float64" in marks[3]
    assert "holds 9007199254740993: a float64 column holds integers within +-2^53 only" in marks[4]


@pytest.mark.parametrize(("args", "message"), [
    ({"schema": {"a": "int32"}}, r"column 'a' has type 'int32'; a type is one of bool, int64, float64, string"),
    ({"schema": {"a": "list<>"}}, "has type ''"),
    ({"schema": {"a": 3}}, "has type 3"),
    ({"schema": []}, "schema must be an object"),
    ({"schema": {"__unreadable__": "string"}}, "a column of shardstream's own"),
    ({"max_line_bytes": 0}, "max_line_bytes must be a positive int"),
    ({"max_line_bytes": True}, "max_line_bytes must be a positive int"),
    ({"seq_len": 4}, r"format 'jsonl' takes no option\(s\) \['seq_len'\]"),
])
def test_format_args_are_checked(tmp_path: Path, args: dict[str, Any], message: str) -> None:
    write(tmp_path / "a.jsonl", '{"a": 1}\n')
    with pytest.raises(InvalidJobSpec, match=message):
        open_jsonl(tmp_path, **args)


# -- lines ----------------------------------------------------------------------------------------

def test_blank_lines_are_no_samples_and_samples_are_named_by_their_line(tmp_path: Path) -> None:
    content = '\n \t\r\n{"i": 0}\n\n\n{"i": 1}\r\n   \r\n{"i": 2}\n\n{"i": 3}'  # the last line has no "\n"
    write(tmp_path / "a.jsonl", content)
    index = open_jsonl(tmp_path)
    assert index.num_rows == 4
    assert [r["i"] for r in without_marker(read_rows(index))] == [0, 1, 2, 3]
    url = f"file://{tmp_path}/a.jsonl"
    assert [index.describe(i) for i in range(4)] == [f"line {n} of {url}" for n in (3, 6, 8, 10)]


def test_crlf_and_a_byte_order_mark_read_as_plain_lines(tmp_path: Path) -> None:
    lines = [json.dumps({"i": i, "t": f"r{i}"}) for i in range(5)]
    write(tmp_path / "a.jsonl", "\n".join(lines) + "\n")
    write(tmp_path / "b.jsonl", "\ufeff" + "\r\n".join(lines) + "\r\n")
    plain, windows = (read_rows(open_jsonl(tmp_path / name)) for name in ("a.jsonl", "b.jsonl"))
    assert plain == windows == [{"i": i, "t": f"r{i}", UNREADABLE_COLUMN: None} for i in range(5)]
    write(tmp_path / "c.jsonl", lines[0] + "\n\ufeff" + lines[1] + "\n")  # a mark inside a file is no mark
    assert "Unexpected UTF-8 BOM" in read_rows(open_jsonl(tmp_path / "c.jsonl"))[1][UNREADABLE_COLUMN]


def test_empty_and_blank_files_have_no_samples(tmp_path: Path) -> None:
    write(tmp_path / "empty" / "a.jsonl", "")
    write(tmp_path / "blank" / "a.jsonl", "\n\n  \r\n\t\n" * 1000 + "   ")
    for name in ("empty", "blank"):
        with pytest.raises(DatasetNotFound, match="has no rows"):
            open_jsonl(tmp_path / name)
    write(tmp_path / "blank" / "b.jsonl", '{"a": 1}\n')
    index = open_jsonl(tmp_path / "blank")
    assert [s.num_rows for s in index.shards] == [0, 1]
    assert index.describe(0) == f"line 1 of file://{tmp_path}/blank/b.jsonl"
    write(tmp_path / "only-bom" / "a.jsonl", "\ufeff")
    with pytest.raises(DatasetNotFound, match="has no rows"):
        open_jsonl(tmp_path / "only-bom")


def test_bad_lines_are_corrupt_samples_named_by_line(tmp_path: Path) -> None:
    content = (b'{"a": 1}\n{"a": 2,}\n[1, 2]\n"text"\n\xff\xfe{"a": 3}\n{"a": "\\ud800"}\n'
               + b'{"a": ' + b"[" * 100_000 + b"\n" + b'{"a": ' + b"9" * 5000 + b"}\n" + b"\f\n" + b'{"a": 4}\n')
    write(tmp_path / "a.jsonl", content)
    index = open_jsonl(tmp_path, schema={"a": "int64"})
    rows = read_rows(index)
    assert [r["a"] for r in rows] == [1, None, None, None, None, None, None, None, None, 4]
    marks = [r[UNREADABLE_COLUMN] for r in rows]
    assert marks[0] is None and marks[-1] is None
    assert marks[1] == "line 2 is not JSON (Expecting property name enclosed in double quotes at character 9 of the line)"
    assert marks[2] == "line 3 holds a list, not a JSON object"
    assert marks[3] == "line 4 holds a string, not a JSON object"
    assert marks[4] == "line 5 is not UTF-8 text (byte 1 of the line is b'\\xff')"
    assert marks[5].startswith("line 6: key 'a' holds \"\\ud800\", a string with a lone surrogate escape")
    assert marks[6].startswith("line 7 is not JSON Python can read: it nests deeper")
    assert marks[7].startswith("line 8 is not JSON Python can read (Exceeds the limit (4300 digits)")
    assert marks[8] == "line 9 is not JSON (Expecting value at character 1 of the line)"  # \f: no JSON whitespace
    for i in range(10):
        assert index.describe(i) == f"line {i + 1} of file://{tmp_path}/a.jsonl"


# -- units ----------------------------------------------------------------------------------------

LINES = st.lists(st.fixed_dictionaries({}, optional={
    "text": st.text(max_size=12), "id": st.integers(-2**63, 2**63 - 1),
    "score": st.floats(allow_nan=False, width=64), "ids": st.lists(st.integers(-2**63, 2**63 - 1), max_size=4),
    "ok": st.booleans()}), min_size=1, max_size=30)
BLANKS = st.sampled_from(["", " ", "\t\r", "  "])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(docs=LINES, data=st.data())
def test_units_cut_anywhere_read_json_loads_of_every_line(docs: list[dict[str, Any]], data: st.DataObject,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Files split anywhere, blank lines anywhere, CRLF or LF, a BOM or none, a last newline or none,
    units and scan chunks of any size: the samples are json.loads of the non-blank lines, in order,
    each named by its file and line."""
    monkeypatch.setattr(jsonl_lines, "UNIT_LINES", data.draw(st.integers(1, 6)))
    monkeypatch.setattr(jsonl_lines, "UNIT_BYTES", data.draw(st.integers(1, 300)))
    monkeypatch.setattr(jsonl_lines, "SCAN_CHUNK", data.draw(st.integers(1, 64)))
    monkeypatch.setattr(jsonl_lines, "SCAN_SLICE", data.draw(st.integers(1, 64)))
    files = data.draw(st.integers(1, min(4, len(docs))))
    cuts = sorted(data.draw(st.lists(st.integers(1, len(docs) - 1), max_size=files - 1, unique=True))) \
        if len(docs) > 1 else []
    directory = Path(tempfile.mkdtemp())
    expected_names: list[str] = []
    all_lines: list[str] = []
    for f, (a, b) in enumerate(zip([0, *cuts], [*cuts, len(docs)], strict=True)):
        newline = data.draw(st.sampled_from(["\n", "\r\n"]))
        lines: list[str] = []
        for doc in docs[a:b]:
            lines += data.draw(st.lists(BLANKS, max_size=2))
            lines.append(json.dumps(doc, ensure_ascii=data.draw(st.booleans())))
        lines += data.draw(st.lists(BLANKS, max_size=2))
        text = newline.join(lines) + data.draw(st.sampled_from(["", newline]))
        bom = "\ufeff" if data.draw(st.booleans()) else ""
        write(directory / f"part-{f:02d}.jsonl", bom + text)
        all_lines += lines
        expected_names += [f"line {n} of file://{directory}/part-{f:02d}.jsonl"
                           for n, line in enumerate(lines, start=1) if line.strip(" \t\r")]
    schema = {"text": "string", "id": "int64", "score": "float64", "ids": "list<int64>", "ok": "bool"}
    index = open_jsonl(directory, schema=schema)
    assert index.num_rows == len(docs)
    assert all(sum(s.row_group_rows) == s.num_rows for s in index.shards)
    assert all(0 < n <= jsonl_lines.UNIT_LINES for s in index.shards for n in s.row_group_rows)
    rows = without_marker(read_rows(index))
    assert all(same(r, w) for r, w in zip(rows, reference(all_lines, list(schema)), strict=True))
    assert [index.describe(i) for i in range(len(docs))] == expected_names


def test_a_scan_is_the_same_whatever_the_chunk_and_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    content = ("\ufeff" + "   \n" + " " * 50 + '{"a": 1}\n' + "\t" * 40 + "\n\n" + '{"a": 2}' * 9 + "\r\n"
               + "\n" * 30 + '{"b": 3}').encode()
    scans = []
    for chunk, piece in ((1, 1), (2, 1), (3, 3), (7, 2), (64, 5), (64, 64), (10_000, 10_000)):
        monkeypatch.setattr(jsonl_lines, "SCAN_CHUNK", chunk)
        monkeypatch.setattr(jsonl_lines, "SCAN_SLICE", piece)
        monkeypatch.setattr(jsonl_lines, "UNIT_LINES", 2)
        scans.append(jsonl_lines.scan_lines(io.BytesIO(content)))
    for scan in scans[1:]:
        for name in ("starts", "ends", "counts", "first_lines", "blank_rows", "blanks_before"):
            np.testing.assert_array_equal(getattr(scan, name), getattr(scans[0], name))
        assert (scan.lines, scan.longest, scan.longest_line) == (scans[0].lines, scans[0].longest,
                                                                  scans[0].longest_line)
    scan = scans[0]
    assert scan.samples == 3 and scan.lines == 36
    assert [scan.line_of(r) for r in range(3)] == [2, 5, 36]
    assert (scan.longest, scan.longest_line) == (len('{"a": 2}' * 9) + 1, 5)  # its "\r" counts
    assert scan.starts.tolist()[0] == 3 + 4  # after the mark and the blank first line


def test_too_many_runs_of_blank_lines_name_samples_by_count(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jsonl_lines, "MAX_BLANK_RUNS", 3)
    write(tmp_path / "a.jsonl", "".join(f'{{"i": {i}}}\n\n' for i in range(6)))
    index = open_jsonl(tmp_path)
    assert index.num_rows == 6
    assert index.describe(4) == f"non-blank line 5 of file://{tmp_path}/a.jsonl"
    rows = read_rows(index)
    assert [r["i"] for r in rows] == list(range(6))


def test_units_hold_a_few_thousand_lines_or_a_few_mib(tmp_path: Path) -> None:
    write(tmp_path / "short.jsonl", "".join(f'{{"i": {i}}}\n' for i in range(10_000)))
    long_text = "x" * 3000
    write(tmp_path / "wide.jsonl", "".join(json.dumps({"i": i, "t": long_text}) + "\n" for i in range(3000)))
    short, wide = open_jsonl(tmp_path / "short.jsonl"), open_jsonl(tmp_path / "wide.jsonl")
    assert short.shards[0].row_group_rows == (4096, 4096, 1808)
    line = len(json.dumps({"i": 1000, "t": long_text})) + 1
    assert wide.shards[0].row_group_rows[0] in range(4 * 2**20 // (line + 1), 4 * 2**20 // (line - 3) + 1)
    scan = wide.shards[0].layout.scan
    assert all(int(e - s) <= 4 * 2**20 for s, e in zip(scan.starts, scan.ends, strict=True))


# -- files ----------------------------------------------------------------------------------------

def test_a_line_past_max_line_bytes_is_refused_at_open_without_holding_it(tmp_path: Path) -> None:
    big = json.dumps({"text": "y" * (10 * 2**20)})  # 10 MiB on one line
    write(tmp_path / "a.jsonl", '{"text": "small"}\n' + big + "\n")
    index = open_jsonl(tmp_path, max_line_bytes=DEFAULT_LIMITS.line_bytes)  # within the default bound
    assert [r["text"] for r in read_rows(index)] == ["small", json.loads(big)["text"]]
    tracemalloc.start()
    try:
        with pytest.raises(UnreadableShard, match=(
                rf"line 2 of 'file://{tmp_path}/a\.jsonl' is {len(big):,} bytes, longer than max_line_bytes "
                r"1,048,576 .*max_line_bytes setting")):
            jsonl_format.SCANS = jsonl_format.KeptScans(8)  # scanned again, measured
            open_jsonl(tmp_path, max_line_bytes=2**20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2.5 * jsonl_lines.SCAN_CHUNK + 2**20, peak  # a chunk and its newline mask, never the line


def test_scanning_many_short_lines_holds_a_slice_of_them_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jsonl_lines, "SCAN_CHUNK", 2**20)
    monkeypatch.setattr(jsonl_lines, "SCAN_SLICE", 2**16)
    content = b"{}\n" * (16 * 2**20 // 3)  # 5.6 million samples
    tracemalloc.start()
    try:
        scan = jsonl_lines.scan_lines(io.BytesIO(content))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert scan.samples == len(content) // 3 and len(scan.counts) == -(-scan.samples // jsonl_lines.UNIT_LINES)
    assert peak < 6 * 2**20, peak  # not 8 bytes of offsets per line of the file (45 MB), nor per line of a chunk


def test_max_line_bytes_is_the_services_setting_unless_the_job_asks_for_less() -> None:
    assert job_format_args("jsonl", None, {})["max_line_bytes"] == DEFAULT_LIMITS.line_bytes
    assert job_format_args("jsonl", {"max_line_bytes": 5}, {}, 1000)["max_line_bytes"] == 5
    assert job_format_args("jsonl", {}, {}, 1000)["max_line_bytes"] == 1000
    assert "max_line_bytes" not in job_format_args("parquet", {}, {})
    limits = RequestLimits(line_bytes=1000)
    spec = pb.JobSpec(dataset=["/d"], batch_size=1, world_size=1, format="jsonl",
                      format_args_json=json.dumps({"max_line_bytes": 1000}))
    read_spec(spec, limits)
    spec.format_args_json = json.dumps({"max_line_bytes": 1001})
    with pytest.raises(InvalidJobSpec, match=r"format_args max_line_bytes 1,001 is above .*max_line_bytes setting"):
        read_spec(spec, limits)


def test_a_file_changed_after_open_is_dataset_changed_not_other_bytes(tmp_path: Path) -> None:
    path = write(tmp_path / "a.jsonl", '{"a": 1}\n{"a": 2}\n')
    index = open_jsonl(tmp_path)
    assert [r["a"] for r in read_rows(index)] == [1, 2]
    with open(path, "r+b") as f:  # the same length, in place
        f.write(b'{"a": 7}')
    with pytest.raises(DatasetChanged, match=r"a\.jsonl' changed after the job opened it"):
        read_rows(index)
    os.replace(write(tmp_path / "new.tmp", '{"a": 1}\n{"a": 2}\n'), path)  # the same bytes, another file
    with pytest.raises(DatasetChanged):
        read_rows(index)
    assert [r["a"] for r in read_rows(open_jsonl(tmp_path))] == [1, 2]  # a new job reads the new file


@pytest.mark.parametrize(("name", "content", "kind"), [
    ("a.jsonl.gz", gzip.compress(b'{"a": 1}\n', mtime=0), "gz"),  # mtime 0: the same bytes each run
    ("a.jsonl", gzip.compress(b'{"a": 1}\n', mtime=0), "gzip"),
    ("a.jsonl.zst", b"\x28\xb5\x2f\xfd....", "zst"),
    ("a.ndjson", b"\x28\xb5\x2f\xfd....", "zstd"),
    ("b.jsonl", bz2.compress(b'{"a": 1}\n'), "bzip2"),
])
def test_compressed_files_are_refused_by_name(tmp_path: Path, name: str, content: bytes, kind: str) -> None:
    write(tmp_path / name, content)
    with pytest.raises(UnreadableShard, match=rf"{name.replace('.', '[.]')}' is {kind}-compressed.*decompress it"):
        open_jsonl(tmp_path)


def test_text_that_starts_like_a_compressed_stream_is_read_as_text(tmp_path: Path) -> None:
    write(tmp_path / "a.jsonl", 'BZh9 is no JSON\n{"a": 1}\n')
    rows = read_rows(open_jsonl(tmp_path))
    assert rows[0][UNREADABLE_COLUMN].startswith("line 1 is not JSON") and rows[1]["a"] == 1


def test_a_directory_lists_jsonl_and_ndjson_files_and_a_named_file_is_read(tmp_path: Path) -> None:
    for name, i in (("b.jsonl", 1), ("a.ndjson", 0), ("c.json", 9), ("_SUCCESS.jsonl", 9), (".hidden.jsonl", 9),
                    ("sub/d.jsonl", 2)):
        write(tmp_path / name, json.dumps({"i": i}) + "\n")
    index = open_jsonl(tmp_path)
    assert [s.url.rsplit("/", 1)[-1] for s in index.shards] == ["a.ndjson", "b.jsonl", "d.jsonl"]
    assert [r["i"] for r in read_rows(index)] == [0, 1, 2]
    assert [r["i"] for r in read_rows(open_jsonl(tmp_path / "c.json"))] == [9]


def test_a_file_is_scanned_once_per_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path / "a.jsonl", '{"a": 1}\n')
    scans: list[str] = []
    real = jsonl_format._scan_file
    monkeypatch.setattr(jsonl_format, "_scan_file", lambda url, size, version: scans.append(url) or real(
        url, size, version))
    monkeypatch.setattr(jsonl_format, "SCANS", jsonl_format.KeptScans(8))
    open_jsonl(tmp_path)
    open_jsonl(tmp_path, schema={"a": "float64"})
    assert len(scans) == 1
    os.utime(path, (1, 1))  # a new version
    open_jsonl(tmp_path)
    assert len(scans) == 2


def test_units_are_named_by_their_schema(tmp_path: Path) -> None:
    """Two schemas over one file make different tables: they must never share a cached unit."""
    write(tmp_path / "a.jsonl", '{"a": 1}\n')
    keys = {RowGroupKey(open_jsonl(tmp_path, schema={"a": kind}).shards[0], 0, None).digest
            for kind in ("int64", "float64")}
    assert len(keys) == 2


# -- through the decoder --------------------------------------------------------------------------

@pytest.fixture()
def corrupt_index(tmp_path: Path) -> DatasetIndex:
    lines = [json.dumps({"idx": i, "text": f"sample {i}"}) for i in range(8)]
    lines[3] = '{"idx": 3, "text": "cut off'
    write(tmp_path / "a.jsonl", "\n".join(lines) + "\n")
    return open_jsonl(tmp_path)


def test_without_a_transform_a_corrupt_line_fails_its_batch_naming_the_line(corrupt_index: DatasetIndex) -> None:
    job = DecodeJob.alone("j", corrupt_index)
    reader = memory_reader(corrupt_index)
    batch = decode_batch(job, reader, None, 0, np.array([5, 0, 7]))
    assert set(batch.arrays) == {"idx", "text"}  # no marker column
    np.testing.assert_array_equal(batch.arrays["idx"], [5, 0, 7])
    with pytest.raises(CorruptSample, match=(r"sample 3 \(line 4 of .*a\.jsonl\) cannot be read: line 4 is not "
                                             r"JSON \(Unterminated string")):
        decode_batch(job, reader, None, 0, np.array([5, 3, 7]))


def test_with_a_transform_on_corrupt_skip_replaces_a_corrupt_line(corrupt_index: DatasetIndex) -> None:
    transform = build_transform("tests.transforms:text_length", {}, ("tests.transforms",))
    failing = DecodeJob.alone("j", corrupt_index, transform="tests.transforms:text_length",
                              allowed_transform_modules=("tests.transforms",))
    with pytest.raises(CorruptSample, match=r"sample 3 \(line 4 of .*\) cannot be read: line 4 is not JSON"):
        decode_batch(failing, memory_reader(corrupt_index), transform, 0, np.array([2, 3]))
    skipping = DecodeJob.alone("j", corrupt_index, transform="tests.transforms:text_length", on_corrupt="skip",
                               allowed_transform_modules=("tests.transforms",))
    batch = decode_batch(skipping, memory_reader(corrupt_index), transform, 0, np.array([2, 3]))
    assert batch.replaced == 1 and batch.indices.tolist() == [2, 4]
    np.testing.assert_array_equal(batch.arrays["length"], [len("sample 2"), len("sample 4")])


def test_a_key_a_line_lacks_is_a_null_named_by_line(tmp_path: Path) -> None:
    write(tmp_path / "a.jsonl", '{"idx": 0, "n": 5}\n\n{"idx": 1}\n{"idx": 2, "n": 7}\n')
    index = open_jsonl(tmp_path)
    with pytest.raises(CorruptSample, match=r"sample 1 \(line 3 of .*a\.jsonl\): column 'n' holds a null"):
        decode_batch(DecodeJob.alone("j", index), memory_reader(index), None, 0, np.array([0, 1, 2]))
    masked = decode_batch(DecodeJob.alone("j", index, nulls="mask"), memory_reader(index), None, 0,
                          np.array([0, 1, 2]))
    assert masked.arrays["n_mask"].tolist() == [True, False, True]
    assert masked.arrays["n"][[0, 2]].tolist() == [5, 7]


def test_a_weights_column_with_a_corrupt_line_is_refused_naming_it(tmp_path: Path) -> None:
    from shardstream.service.control.per_sample import read_weights

    write(tmp_path / "a.jsonl", '{"w": 1.0}\n{"w": 2.0}\n{"w": "heavy"}\n')
    index = open_jsonl(tmp_path, schema={"w": "float64"})
    with pytest.raises(InvalidJobSpec, match=(r"sample 2 \(line 3 of .*a\.jsonl\) cannot be read: line 3: key 'w' "
                                              r"holds a string \(\"heavy\"\) where the column is float64")):
        read_weights(index, "w")
