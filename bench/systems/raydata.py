"""Ray Data: read_parquet -> map_batches(decode + crop + flip) -> iter_torch_batches(64).

The consumer starts a local Ray with as many CPUs as the machine has cores
(the same cores the other systems get) and iterates in the driver, as a
training script using Ray Data would. Shuffled, it does what Ray's docs advise
for training ingest rather than a global `random_shuffle` (an all-to-all
exchange every epoch): the blocks in a random order each epoch, and a local
shuffle buffer of decoded rows in the driver. That order is not a uniform
permutation as the other systems' are; it is the cheaper approximation.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import ray
import ray.data

from bench.augment import decode_batch
from bench.meter import Batch, LoaderFactory
from bench.spec import ConsumerSpec
from bench.systems.epochs import over_epochs

_rng: np.random.Generator | None = None  # one per Ray worker process
LOCAL_SHUFFLE_ROWS = 1024  # decoded rows in the driver's shuffle buffer (154 MB of 3x224x224)


def decode_crop_flip_batch(batch: dict[str, np.ndarray], crop: int) -> dict[str, np.ndarray]:
    """The map_batches function: numpy batch of JPEG bytes -> uint8 [B, 3, crop, crop]."""
    global _rng
    if _rng is None:
        _rng = np.random.default_rng()
    return {"image": decode_batch(list(batch["image"]), crop, _rng), "label": batch["label"]}


def loader_factory(spec: ConsumerSpec) -> LoaderFactory:
    @contextlib.contextmanager
    def open_loader() -> Iterator[Iterable[Batch]]:
        # address="local": always a new local Ray, even where another one runs on this machine.
        ray.init(address="local", num_cpus=spec.workers, include_dashboard=False,
                 logging_level=logging.WARNING,
                 log_to_driver=False)
        try:
            context = ray.data.DataContext.get_current()
            context.enable_progress_bars = False
            dataset = ray.data.read_parquet(spec.dataset, columns=["image", "label"])
            if spec.shuffle:
                dataset = dataset.randomize_block_order()
            dataset = dataset.map_batches(decode_crop_flip_batch, fn_kwargs={"crop": spec.crop},
                                          batch_size=spec.batch_size, batch_format="numpy")

            def epoch(_: int) -> Iterable[Any]:
                return dataset.iter_torch_batches(
                    batch_size=spec.batch_size, local_shuffle_buffer_size=LOCAL_SHUFFLE_ROWS if spec.shuffle else None)

            yield over_epochs(epoch, spec.epochs)
        finally:
            ray.shutdown()

    return open_loader


__all__ = ["decode_crop_flip_batch", "loader_factory"]
