"""bench.batch_glue: a batch's CPU around its native call, on a small JPEG dataset."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from bench.batch_glue import measure
from bench.workload import encode_jpeg, synthetic_image


def test_the_native_call_is_part_of_the_whole(tmp_path: Path) -> None:
    images = [encode_jpeg(synthetic_image(0, i, 64), 90) for i in range(40)]
    pq.write_table(pa.table({"image": images, "label": list(range(40))}), tmp_path / "part-0.parquet",
                   row_group_size=8)
    cost = measure(tmp_path, 48, samples=40, passes=2)
    assert 0 < cost.native < cost.total and cost.glue == cost.total - cost.native
