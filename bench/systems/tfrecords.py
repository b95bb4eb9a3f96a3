"""The JPEG workload as TFRecord files, for tf.data.

tf.data service workers run the dataset graph themselves, so a Python
generator reading Parquet (``from_generator``) cannot feed them; instead the
same rows (the same JPEG bytes and labels, in the same order) are exported
once to TFRecord files of ``tf.train.Example``, one file per Parquet shard,
and cached next to the workload.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pyarrow.parquet as pq

from bench.workload import parquet_files

log = logging.getLogger(__name__)

MANIFEST = "tfrecords.json"


def tfrecord_dir(parquet_dir: Path) -> Path:
    return parquet_dir.with_name(parquet_dir.name + ".tfrecord")


def tfrecord_files(directory: Path) -> list[str]:
    return sorted(str(p) for p in directory.glob("*.tfrecord"))


def export_tfrecords(parquet_dir: Path) -> Path:
    """The TFRecord copy of `parquet_dir`, written if missing; returns its directory."""
    import tensorflow as tf

    target = tfrecord_dir(parquet_dir)
    if (target / MANIFEST).exists():
        return target
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    rows = 0
    for path in parquet_files(parquet_dir):
        table = pq.read_table(path, columns=["image", "label"])
        out = tmp / (Path(path).stem + ".tfrecord")
        with tf.io.TFRecordWriter(str(out)) as writer:
            for image, label in zip(table.column("image").to_pylist(),
                                    table.column("label").to_pylist(), strict=True):
                example = tf.train.Example(features=tf.train.Features(feature={
                    "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[image])),
                    "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
                }))
                writer.write(example.SerializeToString())
                rows += 1
    (tmp / MANIFEST).write_text(json.dumps({"source": str(parquet_dir), "rows": rows}) + "\n")
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    log.info("exported %d rows to %s", rows, target)
    return target


__all__ = ["export_tfrecords", "tfrecord_dir", "tfrecord_files"]
