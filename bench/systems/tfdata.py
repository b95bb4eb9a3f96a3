"""tf.data service: the same decode in TensorFlow ops, run by a tf.data service worker.

The consumer builds TFRecordDataset -> map(parse, decode_jpeg, random_crop,
random_flip_left_right, HWC -> CHW) -> batch(64) -> prefetch and hands it to
the dispatcher with ``distribute(processing_mode="parallel_epochs")``; the
worker (another process, started by the harness) runs it and streams batches
back. Batches become torch tensors without a copy (``torch.from_numpy``).

With ``cache_decoded`` the pipeline is tf.data's own answer to decoding once:
parse + decode_jpeg -> cache() -> shuffle -> random_crop + flip -> batch,
repeated for every epoch inside one tf.data service job, because the cache
lives in the job's iterator on the worker and a new job starts empty.
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


def pipeline(files: list[str], crop: int, batch_size: int, shuffle: bool = False,
             cache_decoded: bool = False, epochs: int = 1) -> Any:
    features = {"image": tf.io.FixedLenFeature([], tf.string),
                "label": tf.io.FixedLenFeature([], tf.int64)}

    def decode(record: Any) -> dict[str, Any]:
        example = tf.io.parse_single_example(record, features)
        return {"image": tf.io.decode_jpeg(example["image"], channels=3), "label": example["label"]}

    def augment(sample: dict[str, Any]) -> dict[str, Any]:
        image = tf.image.random_crop(sample["image"], [crop, crop, 3])
        image = tf.image.random_flip_left_right(image)
        return {"image": tf.transpose(image, [2, 0, 1]), "label": sample["label"]}

    records = tf.data.TFRecordDataset(files)
    if cache_decoded:  # decode once, then shuffle the decoded images each epoch
        samples = records.map(decode, num_parallel_calls=tf.data.AUTOTUNE).cache()
        if shuffle:
            samples = samples.shuffle(SHUFFLE_BUFFER, reshuffle_each_iteration=True)
        return (samples.map(augment, num_parallel_calls=tf.data.AUTOTUNE)
                .batch(batch_size)
                .repeat(epochs)
                .prefetch(tf.data.AUTOTUNE))
    if shuffle:
        records = records.shuffle(SHUFFLE_BUFFER, reshuffle_each_iteration=True)
    return (records
            .map(lambda record: augment(decode(record)), num_parallel_calls=tf.data.AUTOTUNE)
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
        epochs_in_job = spec.epochs if spec.cache_decoded else 1
        distributed = pipeline(files, spec.crop, spec.batch_size, spec.shuffle, spec.cache_decoded,
                               epochs_in_job).apply(
            tf.data.experimental.service.distribute(processing_mode="parallel_epochs",
                                                    service=spec.address))

        def epoch(_: int) -> Iterable[Batch]:
            return (_to_torch(b) for b in distributed.as_numpy_iterator())

        yield over_epochs(epoch, spec.epochs // epochs_in_job)

    return open_loader


__all__ = ["loader_factory", "pipeline"]
