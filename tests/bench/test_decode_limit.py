"""bench.decode_limit: one core's decode + crop + flip of the workload, per decoder, and its summary."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench.augment import crop_flip_chw
from bench.decode_limit import (
    cpu_per_1k,
    decoders,
    fastest,
    limit_text,
    measure_in_processes,
    summarize,
    workload_images,
)
from bench.workload import encode_jpeg, synthetic_image

IMAGES = [encode_jpeg(synthetic_image(0, i, 64), 90) for i in range(6)]


def test_every_decoder_gives_the_same_pixels() -> None:
    """The floor is of the same work whichever decoder does it, the same draws included."""
    found = decoders()
    assert set(found) == {"pillow", "simplejpeg", "native crop"}
    for data in IMAGES:
        crops = [work(data, 48, np.random.default_rng(1)) for work in found.values()]
        assert all(c.shape == (3, 48, 48) and np.array_equal(c, crops[0]) for c in crops)


def test_cpu_per_1k_is_the_least_pass_per_1000_samples() -> None:
    calls: list[bytes] = []

    def work(data: bytes, crop: int, rng: np.random.Generator) -> np.ndarray:
        calls.append(data)
        return crop_flip_chw(np.zeros((64, 64, 3), np.uint8), crop, rng)

    value = cpu_per_1k(IMAGES, work, 48, passes=2)
    assert calls == IMAGES * 2
    assert 0 <= value < 1000


def test_workload_images_are_read_in_file_order(tmp_path: Path) -> None:
    for shard in range(2):
        pq.write_table(pa.table({"image": pa.array(IMAGES[shard * 3:shard * 3 + 3], pa.binary())}),
                       tmp_path / f"part-{shard:05d}.parquet")
    assert workload_images(tmp_path, 4) == IMAGES[:4]
    assert workload_images(tmp_path, 100) == IMAGES


def test_summary_medians_and_the_fastest() -> None:
    summary = summarize([{"pillow": 0.3, "simplejpeg": 0.2}, {"pillow": 0.5, "simplejpeg": 0.1},
                         {"pillow": 0.4}])
    assert summary["cpu_per_1k"] == {"pillow": pytest.approx(0.4), "simplejpeg": pytest.approx(0.15)}
    assert fastest({"decode_limit": summary}) == ("simplejpeg", pytest.approx(0.15))
    assert fastest({}) is None
    text = limit_text({"decode_limit": summary})
    assert text.index("simplejpeg 0.150") < text.index("pillow 0.400")
    assert limit_text({}) == ""


def test_measured_in_new_processes_every_decoder_has_its_figure(tmp_path: Path) -> None:
    pq.write_table(pa.table({"image": pa.array(IMAGES, pa.binary())}), tmp_path / "part-00000.parquet")
    limits = measure_in_processes(tmp_path, 48, processes=2, samples=6, passes=1)
    assert set(limits) == {"pillow", "simplejpeg", "native crop"}
    assert all(0 < value < 1000 for value in limits.values())
