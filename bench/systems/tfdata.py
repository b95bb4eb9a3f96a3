"""tf.data service: the same decode in TensorFlow ops, run by a tf.data service worker.

The consumer builds TFRecordDataset -> map(parse, decode_jpeg, random_crop,
random_flip_left_right, HWC -> CHW) -> batch(64) -> prefetch and hands it to
the dispatcher with ``distribute(processing_mode="parallel_epochs")``; the
worker (another process, started by the harness) runs it and streams batches
back. Batches become torch tensors without a copy (``torch.from_numpy``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf
import torch

from bench.meter import Batch, LoaderFactory
from bench.spec import ConsumerSpec
from bench.systems.epochs import over_epochs
from bench.systems.tfrecords import tfrecord_files

# Records in the shuffle buffer: the whole JPEG workload (16,000 records, 270 MB), so each epoch
# is a uniform permutation as with the other systems.
SHUFFLE_BUFFER = 16_384


def pipeline(files: list[str], crop: int, batch_size: int, shuffle: bool = False) -> Any:
    features = {"image": tf.io.FixedLenFeature([], tf.string),
                "label": tf.io.FixedLenFeature([], tf.int64)}

    def decode(record: Any) -> dict[str, Any]:
        example = tf.io.parse_single_example(record, features)
        image = tf.io.decode_jpeg(example["image"], channels=3)
        image = tf.image.random_crop(image, [crop, crop, 3])
        image = tf.image.random_flip_left_right(image)
        return {"image": tf.transpose(image, [2, 0, 1]), "label": example["label"]}

    records = tf.data.TFRecordDataset(files)
    if shuffle:
        records = records.shuffle(SHUFFLE_BUFFER, reshuffle_each_iteration=True)
    return (records
            .map(decode, num_parallel_calls=tf.data.AUTOTUNE)
            .batch(batch_size)
            .prefetch(tf.data.AUTOTUNE))


def _to_torch(batch: dict[str, np.ndarray]) -> Batch:
    return {name: torch.from_numpy(np.asarray(value)) for name, value in batch.items()}


def loader_factory(spec: ConsumerSpec) -> LoaderFactory:
    @contextlib.contextmanager
    def open_loader() -> Iterator[Iterable[Batch]]:
        files = tfrecord_files(Path(spec.dataset))
        if not files:
            raise FileNotFoundError(f"no TFRecord files in {spec.dataset}")
        distributed = pipeline(files, spec.crop, spec.batch_size, spec.shuffle).apply(
            tf.data.experimental.service.distribute(processing_mode="parallel_epochs",
                                                    service=spec.address))

        def epoch(_: int) -> Iterable[Batch]:
            return (_to_torch(b) for b in distributed.as_numpy_iterator())

        yield over_epochs(epoch, spec.epochs)

    return open_loader


__all__ = ["loader_factory", "pipeline"]
