"""Values as the dataset holds them: generated Parquet files through the decoders' batch path,
compared with pyarrow's own read (`pq.read_table`), value for value and dtype for dtype.

Each example writes one file (types, nulls anywhere, whole row groups of nulls, empty row groups,
empty files), opens it as a job would (the index's schema and footers: refusals at open), gathers
every row in a shuffled order through `decode_batch`, sends the batch through the wire and the
client's tensors, and checks each column against the oracle below.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from shardstream.client.tensors import batch_to_tensors
from shardstream.proto.errors import CorruptSample, InvalidJobSpec
from shardstream.proto.wire import encode_batch, parse_batch
from shardstream.service.formats.parquet import index_files
from shardstream.service.node.batching import decode_batch
from shardstream.service.node_messages import DecodeJob
from shardstream.service.transforms.collate import Collation
from shardstream.service.transforms.job_schema import check_job_schema
from tests.datasets import memory_reader

# What each Arrow type arrives as (docs/formats.md, "Values and dtypes"). Lists and fixed-size
# lists arrive as their values' dtype; strings as list[str].
EXPECTED: dict[str, torch.dtype | None] = {
    "bool": torch.bool, "int8": torch.int8, "int16": torch.int16, "int32": torch.int32, "int64": torch.int64,
    "uint8": torch.uint8, "uint16": torch.uint16, "uint32": torch.uint32, "uint64": torch.uint64,
    "halffloat": torch.float16, "float": torch.float32, "double": torch.float64,
    "timestamp[ms]": torch.int64, "timestamp[us, tz=UTC]": torch.int64, "date32[day]": torch.int32,
    "duration[s]": torch.int64, "string": None, "large_string": None,
}
REFUSED = ("decimal128(10, 2)", "binary")  # no tensor holds them: InvalidJobSpec at open

INT_EDGES = {
    pa.int8(): (-2**7, 2**7 - 1), pa.int16(): (-2**15, 2**15 - 1), pa.int32(): (-2**31, 2**31 - 1),
    pa.int64(): (-2**63, 2**63 - 1), pa.uint8(): (0, 2**8 - 1), pa.uint16(): (0, 2**16 - 1),
    pa.uint32(): (0, 2**32 - 1), pa.uint64(): (0, 2**64 - 1),
}
NUMBER_TYPES = [*INT_EDGES, pa.bool_(), pa.float16(), pa.float32(), pa.float64(), pa.timestamp("ms"),
                pa.timestamp("us", tz="UTC"), pa.date32(), pa.duration("s")]


@dataclass(frozen=True)
class Column:
    name: str
    array: pa.Array  # every row of the file
    shape: str  # "scalar", "fixed", "list", "strings", "refused"
    leaf: pa.DataType


def _numbers(draw: st.DrawFn, kind: pa.DataType, count: int) -> list[Any]:
    if kind in INT_EDGES:
        low, high = INT_EDGES[kind]
        near = [low, high, low + 1, high - 1, 0]
        if kind == pa.int64():
            near += [2**53 + 1, -(2**53) - 1, 2**53]
        if kind == pa.uint64():
            near += [2**63, 2**63 + 1, 2**53 + 1]
        values = st.one_of(st.sampled_from(near), st.integers(low, high))
    elif pa.types.is_boolean(kind):
        values = st.booleans()
    elif pa.types.is_floating(kind):
        width = {pa.float16(): 16, pa.float32(): 32, pa.float64(): 64}[kind]
        values = st.floats(width=width, allow_nan=False)
    elif pa.types.is_date(kind):
        values = st.integers(-10**6, 10**6)
    else:
        values = st.integers(-2**62, 2**62)
    return draw(st.lists(values, min_size=count, max_size=count))


def _with_nulls(draw: st.DrawFn, values: list[Any], row_groups: list[int]) -> list[Any]:
    """None anywhere, or a whole row group of None, or none at all."""
    how = draw(st.sampled_from(["none", "some", "group"]))
    if how == "some":
        return [None if draw(st.integers(0, 3)) == 0 else v for v in values]
    if how == "group" and row_groups:
        which = draw(st.integers(0, len(row_groups) - 1))
        start = sum(row_groups[:which])
        return [None if start <= i < start + row_groups[which] else v for i, v in enumerate(values)]
    return values


@st.composite
def columns(draw: st.DrawFn, name: str, count: int, row_groups: list[int]) -> Column:
    shape = draw(st.sampled_from(["scalar"] * 3 + ["fixed"] * 2 + ["list"] * 3 + ["strings"] * 2 + ["refused"]))
    if shape == "strings":
        values = _with_nulls(draw, draw(st.lists(st.text(max_size=5), min_size=count, max_size=count)), row_groups)
        how = draw(st.sampled_from(["string", "large_string", "dictionary"]))
        if how == "dictionary":
            return Column(name, pa.array(values, pa.string()).dictionary_encode(), shape, pa.string())
        kind = pa.string() if how == "string" else pa.large_string()
        return Column(name, pa.array(values, kind), shape, kind)
    if shape == "refused":
        kind = draw(st.sampled_from([pa.decimal128(10, 2), pa.binary()]))
        return Column(name, pa.array([None] * count, kind), shape, kind)
    leaf = draw(st.sampled_from(NUMBER_TYPES))
    if shape == "scalar":
        values = _with_nulls(draw, _numbers(draw, leaf, count), row_groups)
        return Column(name, pa.array(values, leaf), shape, leaf)
    width = draw(st.integers(1, 3)) if shape == "fixed" else 0
    lengths = [width] * count if width else draw(st.lists(st.integers(0, 3), min_size=count, max_size=count))
    flat = _with_nulls(draw, _numbers(draw, leaf, sum(lengths)), [])
    rows, at = [], 0
    for length in lengths:
        rows.append(flat[at:at + length])
        at += length
    rows = _with_nulls(draw, rows, row_groups)
    kind = pa.list_(leaf, width) if width else draw(st.sampled_from([pa.list_(leaf), pa.large_list(leaf)]))
    return Column(name, pa.array(rows, kind), shape, leaf)


@st.composite
def datasets(draw: st.DrawFn) -> tuple[list[Column], list[int]]:
    count = draw(st.integers(0, 12))
    cuts = sorted(draw(st.lists(st.integers(0, count), max_size=3)))  # repeated cuts: empty row groups
    row_groups = [b - a for a, b in zip([0, *cuts], [*cuts, count], strict=True)]
    return [draw(columns(f"c{i}", count, row_groups)) for i in range(draw(st.integers(1, 3)))], row_groups


def _write(path: Path, cols: list[Column], row_groups: list[int]) -> None:
    table = pa.table({c.name: c.array for c in cols})
    with pq.ParquetWriter(path, table.schema) as writer:
        start = 0
        for rows in row_groups:
            writer.write_table(table.slice(start, rows), row_group_size=max(rows, 1))
            start += rows


def _floats(kind: pa.DataType) -> bool:
    return pa.types.is_floating(kind)


def _inner_nulls(c: Column) -> list[bool]:
    """Each row: a null inside its list."""
    return [row is not None and any(v is None for v in row) for row in _stored(c.array, c.leaf)]


def expected_outcome(cols: list[Column], masks: bool) -> str:
    """"open" (refused at open), "batch" (a batch refused), or "ok"."""
    for c in cols:
        if c.shape == "refused":
            return "open"
    if not masks:
        for c in cols:
            if c.shape in ("scalar", "fixed", "strings") and not _floats(c.leaf) and c.array.null_count:
                return "open"
            if c.shape == "fixed" and not _floats(c.leaf) and any(_inner_nulls(c)):
                return "open"
    for c in cols:
        if c.shape == "list" and (not masks and c.array.null_count):
            return "batch"
        if c.shape in ("list", "fixed") and not _floats(c.leaf) and any(_inner_nulls(c)):
            return "batch"
    return "ok"


def _stored(array: pa.ChunkedArray | pa.Array, leaf: pa.DataType) -> list[Any]:
    """pyarrow's values, temporal ones as the integers they are stored as."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    if pa.types.is_timestamp(leaf) or pa.types.is_date(leaf) or pa.types.is_duration(leaf):
        storage = pa.int32() if leaf.bit_width == 32 else pa.int64()
        target: pa.DataType = storage
        if pa.types.is_list(array.type):
            target = pa.list_(storage)
        elif pa.types.is_large_list(array.type):
            target = pa.large_list(storage)
        elif pa.types.is_fixed_size_list(array.type):
            target = pa.list_(storage, array.type.list_size)
        array = array.cast(target)
    return array.to_pylist()  # type: ignore[no-any-return]


def _same(got: Any, want: Any) -> bool:
    if want is None:
        return got is None
    if isinstance(want, float):
        return (math.isnan(got) and math.isnan(want)) or got == want
    return bool(got == want)


def _filler(leaf: pa.DataType) -> Any:
    return float("nan") if _floats(leaf) else False if pa.types.is_boolean(leaf) else 0


def check_column(c: Column, oracle: pa.ChunkedArray, order: list[int], got: dict[str, Any], masks: bool) -> None:
    want = _stored(oracle, c.leaf)
    rows = [want[i] for i in order]
    value = got[c.name]
    if masks:
        assert got[f"{c.name}_mask"].dtype == torch.bool
        assert got[f"{c.name}_mask"].tolist() == [r is not None for r in rows]
    if c.shape == "strings":
        assert value == [r if r is not None else "" for r in rows]
        return
    assert value.dtype == EXPECTED[str(c.leaf)], (c.leaf, value.dtype)
    values = value.numpy()
    filler = _filler(c.leaf)
    if c.shape == "scalar":
        assert values.shape == (len(rows),)
        for g, w in zip(values.tolist(), rows, strict=True):
            assert _same(g, filler if w is None else w), (c.leaf, g, w)
    elif c.shape == "fixed":
        width = c.array.type.list_size
        assert values.shape == (len(rows), width)
        for g, w in zip(values.tolist(), rows, strict=True):
            for gv, wv in zip(g, [filler] * width if w is None else w, strict=True):
                assert _same(gv, filler if wv is None else wv), (c.leaf, g, w)
    else:
        lengths = got[f"{c.name}_lengths"].tolist()
        assert lengths == [0 if r is None else len(r) for r in rows]
        assert values.shape == (len(rows), max(lengths, default=0))
        for g, w, n in zip(values.tolist(), rows, lengths, strict=True):
            for gv, wv in zip(g[:n], w or [], strict=True):
                assert _same(gv, filler if wv is None else wv), (c.leaf, g, w)
            assert all(gv == np.array(PAD).astype(values.dtype).item() for gv in g[n:])  # bool: True


PAD = 7


def run(cols: list[Column], row_groups: list[int], masks: bool, seed: int) -> None:
    with tempfile.TemporaryDirectory() as where:
        path = Path(where) / "data.parquet"
        _write(path, cols, row_groups)
        index = index_files([f"file://{path}"], ())
        outcome = expected_outcome(cols, masks)
        event(f"{outcome}{' (no rows)' if index.num_rows == 0 else ''}")
        nulls = "mask" if masks else ""
        if outcome == "open":
            with pytest.raises(InvalidJobSpec) as refused:
                check_job_schema(index.schema, None, "pad", index, nulls)
            named = [c for c in cols if f"column {c.name!r}" in str(refused.value)]
            assert named, str(refused.value)
            if named[0].shape != "refused":  # a null: the file and its first null row
                assert f"of file://{path}" in str(refused.value)
            else:
                assert str(named[0].array.type) in str(refused.value)
            return
        check_job_schema(index.schema, None, "pad", index, nulls)
        if index.num_rows == 0:
            return
        job = DecodeJob.alone("j", index, seed=0, on_corrupt="fail", collate="pad",
                        pad_value=PAD, nulls=nulls)
        order = np.random.default_rng(seed).permutation(index.num_rows)
        reader = memory_reader(index)
        if outcome == "batch":
            with pytest.raises(CorruptSample, match=rf"of file://{path}\): column 'c\d'"):
                decode_batch(job, reader, None, 0, order, collation=Collation("pad", PAD))
            return
        batch = decode_batch(job, reader, None, 0, order, collation=Collation("pad", PAD))
        got = batch_to_tensors(parse_batch(encode_batch(0, 0, 0, batch.arrays, batch.indices)), pin=False)
        oracle = pq.read_table(path)
        for c in cols:
            check_column(c, oracle.column(c.name), order.tolist(), got, masks)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=datasets(), masks=st.booleans(), seed=st.integers(0, 2**16))
@example(data=([Column("c0", pa.array([2**53 + 1, None, 3], pa.int64()), "scalar", pa.int64())], [2, 1]),
         masks=True, seed=0)
@example(data=([Column("c0", pa.array([2**64 - 1, 2**63], pa.uint64()), "scalar", pa.uint64())], [2]),
         masks=False, seed=0)
@example(data=([Column("c0", pa.array([True, None], pa.bool_()), "scalar", pa.bool_())], [1, 1]),
         masks=False, seed=0)
@example(data=([Column("c0", pa.array([None], pa.int8()), "scalar", pa.int8())], [0, 1]),  # an empty group first
         masks=False, seed=0)
@example(data=([Column("c0", pa.array(["a", None, "a"], pa.string()).dictionary_encode(), "strings",
                       pa.string())], [3]), masks=True, seed=0)
def test_batches_hold_what_pyarrow_reads(data: tuple[list[Column], list[int]], masks: bool, seed: int) -> None:
    cols, row_groups = data
    run(cols, row_groups, masks, seed)


def test_an_int64_column_with_a_null_keeps_its_dtype_and_values_in_every_batch(tmp_path: Path) -> None:
    """The row group without a null and the one with it: int64 both, 2**53 + 1 exact."""
    path = tmp_path / "a.parquet"
    pq.write_table(pa.table({"v": pa.array([2**53 + 1, 2, None, 4], pa.int64())}), path, row_group_size=2)
    index = index_files([f"file://{path}"], ())
    with pytest.raises(InvalidJobSpec, match=rf"column 'v' \(int64\) holds a null at row 2 of file://{path}"):
        check_job_schema(index.schema, None, "", index, "")
    job = DecodeJob.alone("j", index, seed=0, on_corrupt="fail", nulls="mask")
    reader = memory_reader(index)
    first = decode_batch(job, reader, None, 0, np.array([0, 1]))
    second = decode_batch(job, reader, None, 0, np.array([2, 3]))
    assert first.arrays["v"].dtype == second.arrays["v"].dtype == np.int64
    assert first.arrays["v"].tolist() == [2**53 + 1, 2] and second.arrays["v"].tolist() == [0, 4]
    assert second.arrays["v_mask"].tolist() == [False, True] and first.arrays["v_mask"].tolist() == [True, True]
