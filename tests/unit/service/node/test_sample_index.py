"""A tier's index of slots: rows set by several actors at once read back, the file grows in whole
steps, and a file replaced under an actor that has it open is grown again."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from shardstream.service.node.sample_index import GAP_ROWS, GROW_ROWS, SLOT, SampleIndex

FOLDER = "dataset/shard"


def test_rows_set_by_two_actors_read_back_and_the_file_grows_in_whole_steps(tmp_path: Path) -> None:
    a, b = SampleIndex(str(tmp_path)), SampleIndex(str(tmp_path))
    rows = [0, 5, GROW_ROWS - 1, GROW_ROWS, 3 * GROW_ROWS + 7, 10 * GROW_ROWS]
    for n, row in enumerate(rows):
        (a if n % 2 else b).set(FOLDER, row, 1000 + row)
    a.set(FOLDER, 1, 1)  # `a` grew the file to row 3*GROW_ROWS+7 itself; `b` has grown it since
    for index in (a, b):
        assert [index.get(FOLDER, row) for row in rows] == [1000 + row for row in rows]
        assert index.get_many(FOLDER, np.array([*rows, 1, 2])).tolist() == [1000 + row for row in rows] + [1, 0]
    assert os.path.getsize(a.path(FOLDER)) == 11 * GROW_ROWS * SLOT.size


def test_an_index_file_replaced_while_open_elsewhere_is_grown_again(tmp_path: Path) -> None:
    index = SampleIndex(str(tmp_path))
    index.set(FOLDER, 4 * GROW_ROWS, 7)
    path = index.path(FOLDER)
    index.forget(os.path.dirname(FOLDER))  # closed (a dataset given back), then a new file in its place
    os.unlink(path)
    index.set(FOLDER, 2 * GROW_ROWS, 9)
    assert os.path.getsize(path) == 3 * GROW_ROWS * SLOT.size  # allocated, not a file with a hole at its end
    assert index.get(FOLDER, 2 * GROW_ROWS) == 9 and index.get(FOLDER, 4 * GROW_ROWS) == 0


def test_slots_of_rows_in_any_order_read_back_within_one_run_and_across_runs(tmp_path: Path) -> None:
    """A batch's rows of a shard, unsorted and repeated, within GAP_ROWS of each other (one read)
    and further apart (a read per run); rows past the file's end are not held."""
    index = SampleIndex(str(tmp_path))
    held = {3: 30, 9: 90, 100: 1000, GAP_ROWS + 500: 5}
    for row, slot in held.items():
        index.set(FOLDER, row, slot)
    end = os.path.getsize(index.path(FOLDER)) // SLOT.size  # the file's rows: the rest are not in it
    held[end - 2] = 11
    index.set(FOLDER, end - 2, 11)
    assert os.path.getsize(index.path(FOLDER)) == end * SLOT.size
    for rows in ([9, 3, 3, 4, 100, 0], [end + 5, end - 2, end - 1, end + 5], [end + 5, 9, end - 2],
                 [GAP_ROWS + 500, 3, 9, 5 * GAP_ROWS + end, 100, 3]):
        assert index.get_many(FOLDER, np.array(rows)).tolist() == [held.get(row, 0) for row in rows]
    assert index.get_many(FOLDER, np.array([], dtype=np.int64)).tolist() == []
    assert SampleIndex(str(tmp_path / "other")).get_many(FOLDER, np.array([3, 9])).tolist() == [0, 0]
