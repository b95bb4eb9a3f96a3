"""What a batch costs around its native call, in one process: ``python -m bench.batch_glue``.

`decode_batch` on shuffled batches of the workload (its row groups read into memory first, as a
warm node holds them), cache off: this thread's CPU seconds per 1,000 samples in all, and inside
`ImageTransform.crop_batch` (the headers read, the native call). The rest is the batch path's
Python and numpy around it: finding the pieces, the JPEGs' addresses, the number columns, the seed
words, the frame. The least of a few passes; the first pass, which makes each row group's view
(node/row_group_views.py), is left out.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.config import full_config
from bench.workload import jpeg_workload

BATCH = 64
SAMPLES = 4096
PASSES = 4


@dataclass(frozen=True)
class GlueCost:
    total: float  # CPU-s per 1,000 samples
    native: float  # ... of it inside ImageTransform.crop_batch

    @property
    def glue(self) -> float:
        return self.total - self.native


def measure(directory: Path, crop: int, samples: int = SAMPLES, passes: int = PASSES) -> GlueCost:
    """The least pass (after a first one) of `samples` shuffled samples of the dataset in `directory`."""
    from shardstream.proto.wire import FrameHeader
    from shardstream.service.formats import index_dataset
    from shardstream.service.node.batching import decode_batch
    from shardstream.service.node.read_counters import SharedReadCounters
    from shardstream.service.node.reader import RowGroupCache, RowGroupSource, ShardReader
    from shardstream.service.node.storage_reader import StorageReader
    from shardstream.service.node_messages import DecodeJob
    from shardstream.service.transforms import build_transform
    from shardstream.service.transforms.image import ImageTransform

    index = index_dataset((str(directory),))
    args = {"size": crop}
    job = DecodeJob.alone("glue", index, columns=("image", "label"), transform="image", transform_args=args)
    transform = build_transform("image", args, ())
    if not isinstance(transform, ImageTransform) or transform.batch_shape() is None:
        raise RuntimeError("the native crop is not built here: the batch path does not apply")
    reader = ShardReader(index, ["image", "label"], RowGroupSource(StorageReader(SharedReadCounters()),
                                                                   RowGroupCache(1 << 30)))  # every row group kept
    order = np.random.default_rng(1).permutation(index.num_rows)[:samples]
    batches = [order[i:i + BATCH] for i in range(0, len(order), BATCH)]
    inside = [0.0]
    real = ImageTransform.crop_batch

    def timed(self: ImageTransform, *args: Any) -> Any:
        started = time.thread_time()
        try:
            return real(self, *args)
        finally:
            inside[0] += time.thread_time() - started

    best = GlueCost(float("inf"), float("inf"))
    ImageTransform.crop_batch = timed  # type: ignore[method-assign]
    try:
        for done in range(passes + 1):
            inside[0] = 0.0
            started = time.thread_time()
            for step, batch in enumerate(batches):
                decode_batch(job, reader, transform, 0, batch, FrameHeader(0, 0, step))
            total = time.thread_time() - started
            if done and total * 1000 / len(order) < best.total:
                best = GlueCost(total * 1000 / len(order), inside[0] * 1000 / len(order))
    finally:
        ImageTransform.crop_batch = real  # type: ignore[method-assign]
    return best


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=SAMPLES)
    parser.add_argument("--passes", type=int, default=PASSES)
    args = parser.parse_args(argv)
    config = full_config()
    cost = measure(jpeg_workload(config.workload), config.crop, args.samples, args.passes)
    print(f"decode_batch, {args.samples:,} shuffled samples, cache off, CPU-s per 1,000 samples: "
          f"{cost.total:.3f} in all, {cost.native:.3f} in the native call, {cost.glue:.3f} around it")


if __name__ == "__main__":
    main()
