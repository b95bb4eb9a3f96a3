"""No transform: numeric columns to batch arrays; columns no tensor holds and nulls refused."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from shardstream.proto.errors import InvalidJobSpec
from shardstream.service.transforms.columns import (
    BadValue,
    check_schema,
    column_specs,
    gather_arrays,
)
from shardstream.service.transforms.pieces import Piece


def column_to_array(name: str, column: pa.ChunkedArray) -> np.ndarray:
    """Every row of one column, through the decode actors' gather path."""
    return table_to_arrays(pa.table({name: column}))[name]


def table_to_arrays(table: pa.Table) -> dict[str, np.ndarray]:
    everything = np.arange(table.num_rows)
    return gather_arrays([Piece(table, everything, everything)], table.num_rows)


@pytest.mark.parametrize("kind", [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(),
                                  pa.float16(), pa.float32(), pa.float64(), pa.bool_()])
def test_scalar_columns_keep_their_dtype(kind: pa.DataType) -> None:
    values = np.array([1, 0, 1]).astype(kind.to_pandas_dtype())
    array = column_to_array("c", pa.chunked_array([pa.array(values, kind)]))
    assert array.shape == (3,)
    assert array.dtype == kind.to_pandas_dtype()
    np.testing.assert_array_equal(array, [1, 0, 1])


def test_fixed_size_lists_become_two_dimensional() -> None:
    flat = pa.array(np.arange(12, dtype=np.int16))
    column = pa.chunked_array([pa.FixedSizeListArray.from_arrays(flat, 4)])
    array = column_to_array("v", column)
    assert array.shape == (3, 4)
    assert array.dtype == np.int16
    np.testing.assert_array_equal(array, np.arange(12).reshape(3, 4))


def test_chunked_and_sliced_columns() -> None:
    lists = pa.FixedSizeListArray.from_arrays(pa.array(np.arange(10, dtype=np.float32)), 2)
    column = pa.chunked_array([lists.slice(1, 2), lists.slice(4, 1)])
    np.testing.assert_array_equal(column_to_array("v", column), [[2, 3], [4, 5], [8, 9]])
    scalars = pa.chunked_array([pa.array([1, 2]), pa.array([3])])
    np.testing.assert_array_equal(column_to_array("s", scalars), [1, 2, 3])


def test_empty_column() -> None:
    lists = pa.FixedSizeListArray.from_arrays(pa.array([], pa.float32()), 3)
    assert column_to_array("v", pa.chunked_array([lists])).shape == (0, 3)


def test_rows_are_gathered_from_several_row_groups_into_their_batch_positions() -> None:
    first = pa.table({"v": pa.FixedSizeListArray.from_arrays(pa.array(np.arange(8, dtype=np.uint8)), 2),
                      "s": pa.array([10, 11, 12, 13])})
    second = pa.table({"v": pa.FixedSizeListArray.from_arrays(pa.array(np.arange(8, 14, dtype=np.uint8)), 2),
                       "s": pa.array([14, 15, 16])})
    pieces = [Piece(first, np.array([3, 0]), np.array([0, 2])),  # scattered positions
              Piece(second, np.array([2, 1, 0]), np.array([3, 4, 5])),  # a contiguous run
              Piece(first, np.array([1]), np.array([1]))]
    arrays = gather_arrays(pieces, 6)
    np.testing.assert_array_equal(arrays["s"], [13, 11, 10, 16, 15, 14])
    np.testing.assert_array_equal(arrays["v"], [[6, 7], [2, 3], [0, 1], [12, 13], [10, 11], [8, 9]])
    assert arrays["v"].dtype == np.uint8


def test_nulls_outside_the_batch_rows_do_not_matter() -> None:
    lists = pa.FixedSizeListArray.from_arrays(pa.array([1, 2, 3, None, 5, 6], pa.int32()), 2,
                                              mask=pa.array([False, False, True]))
    table = pa.table({"v": lists, "s": pa.array([1, None, 3])})
    arrays = gather_arrays([Piece(table, np.array([0]), np.array([0]))], 1)
    np.testing.assert_array_equal(arrays["v"], [[1, 2]])
    with pytest.raises(BadValue, match="'v' holds a null inside its list") as caught:
        gather_arrays([Piece(table, np.array([0, 1]), np.array([0, 1]))], 2)
    assert caught.value.position == 1


def test_table_to_arrays_keeps_column_names_and_order() -> None:
    table = pa.table({"b": [1, 2], "a": [0.5, 1.5]})
    arrays = table_to_arrays(table)
    assert list(arrays) == ["b", "a"]
    np.testing.assert_array_equal(arrays["a"], [0.5, 1.5])


def test_nulls_are_refused_naming_the_column_and_the_first_null_row() -> None:
    with pytest.raises(BadValue, match="'label' holds a null") as caught:
        column_to_array("label", pa.chunked_array([pa.array([1, None]), pa.array([None, 4])]))
    assert caught.value.position == 1


def test_null_lists_are_corrupt_samples() -> None:
    lists = pa.FixedSizeListArray.from_arrays(pa.array([1, 2, 3, 4], pa.int32()), 2,
                                              mask=pa.array([False, True]))
    with pytest.raises(BadValue, match="'v' holds a null"):
        column_to_array("v", pa.chunked_array([lists]))


def test_null_inside_a_fixed_size_list_is_a_corrupt_sample() -> None:
    lists = pa.FixedSizeListArray.from_arrays(pa.array([1, None, 3, 4], pa.int32()), 2)
    with pytest.raises(BadValue, match="'v' holds a null inside its list"):
        column_to_array("v", pa.chunked_array([lists]))


def test_check_schema_accepts_numeric_columns() -> None:
    check_schema(pa.schema([("a", pa.int64()), ("b", pa.bool_()), ("c", pa.float16()),
                            ("d", pa.list_(pa.float32(), 3))]))


@pytest.mark.parametrize("kind", [pa.binary(), pa.list_(pa.int64()),
                                  pa.list_(pa.string(), 2), pa.decimal128(5, 2), pa.null(),
                                  pa.struct([("x", pa.int8())]), pa.list_(pa.list_(pa.int8(), 2), 2)])
def test_check_schema_names_the_non_numeric_column(kind: pa.DataType) -> None:
    schema = pa.schema([("ok", pa.int64()), ("bad_col", kind)])
    with pytest.raises(InvalidJobSpec, match="'bad_col'"):
        check_schema(schema)


def test_strings_always_and_variable_lists_with_pad_collate() -> None:
    check_schema(pa.schema([("caption", pa.string()), ("path", pa.large_string()), ("h", pa.float16())]))
    lists = pa.schema([("ids", pa.list_(pa.int32())), ("boxes", pa.large_list(pa.list_(pa.float32(), 4)))])
    check_schema(lists, pads=True)
    with pytest.raises(InvalidJobSpec, match="collate='pad' pads them"):
        check_schema(lists)
    with pytest.raises(InvalidJobSpec, match="'words'"):
        check_schema(pa.schema([("words", pa.list_(pa.string()))]), pads=True)


@pytest.mark.parametrize("rows", [[0, 1, 2, 3], [0, 2, 1, 3], [3, 2, 1, 0], [1, 1, 2, 2]], ids=str)
@pytest.mark.parametrize("width", [3, 5000], ids=["narrow", "wide"])
def test_every_gather_path_puts_each_row_in_its_place(rows: list[int], width: int) -> None:
    """A run of the batch from a run of the row group, from anywhere, and scattered positions
    (row by row for wide rows, fancy indexing for narrow ones)."""
    values = np.arange(4 * width, dtype=np.int32).reshape(4, width)
    table = pa.table({"v": pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1)), width)})
    contiguous = gather_arrays([Piece(table, np.array(rows), np.arange(4))], 4)["v"]
    np.testing.assert_array_equal(contiguous, values[rows])
    other = pa.table({"v": pa.FixedSizeListArray.from_arrays(pa.array(-values.reshape(-1)), width)})
    at, rest = np.array([0, 2, 5, 7]), np.array([1, 3, 4, 6])
    scattered = gather_arrays([Piece(table, np.array(rows), at), Piece(other, np.arange(4), rest)], 8)["v"]
    np.testing.assert_array_equal(scattered[at], values[rows])
    np.testing.assert_array_equal(scattered[rest], -values)


def test_columns_are_gathered_into_the_arrays_given() -> None:
    table = pa.table({"v": pa.FixedSizeListArray.from_arrays(pa.array(np.arange(6, dtype=np.uint8)), 2),
                      "s": pa.array([1.5, 2.5, 3.5])})
    pieces = [Piece(table, np.array([2, 0]), np.array([0, 1]))]
    specs = column_specs(table.schema, 2)
    assert [(s.name, s.dtype, s.shape) for s in specs] == [("v", np.uint8, (2, 2)), ("s", np.float64, (2,))]
    out = {s.name: np.zeros(s.shape, dtype=s.dtype) for s in specs}
    arrays = gather_arrays(pieces, 2, out=out)
    assert all(arrays[name] is out[name] for name in out)
    np.testing.assert_array_equal(out["v"], [[4, 5], [0, 1]])
    np.testing.assert_array_equal(out["s"], [3.5, 1.5])
