"""Variable-length samples (collate="pad"): token ids per document padded to the batch's longest.

    .venv/bin/python examples/formats/padded.py --address 127.0.0.1:50051 [--data gs://bucket/docs/]

A list column becomes [B, Lmax] (pad_value where a document is shorter) plus <column>_lengths;
a string column arrives as a list of str. bucket_by groups documents of similar length into a batch
(the same documents per rank and epoch, less padding).
"""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
from _common import run


def write_sample(directory: str) -> str:
    docs = [list(range(100 + i, 100 + i + 1 + (7 * i) % 11)) for i in range(24)]
    pq.write_table(pa.table({"ids": pa.array(docs, pa.list_(pa.int32())),
                             "title": [f"document {i}" for i in range(24)]}),
                   os.path.join(directory, "docs.parquet"))
    return directory


if __name__ == "__main__":
    run(__doc__.splitlines()[0], write_sample, collate="pad", pad_value=-1, bucket_by="ids", bucket_window=3)
