"""One small dataset per format for the shared conformance suite (tests/integration/test_formats.py).

Each case writes a dataset whose samples say which global index they are, so
a batch can be checked against DataLoader + DistributedSampler's indices, and
a broken variant whose error must name the file and the cause.
"""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tests.datasets import encode_image, write_indexed


@dataclass(frozen=True)
class FormatCase:
    name: str
    write: Callable[[str], int]  # writes the dataset into a directory; returns its sample count
    key: Callable[[dict[str, Any]], list[int]]  # each sample's global index, from a batch
    break_it: Callable[[str], str]  # writes a broken dataset into a directory; returns the error's regex
    error: str  # the client exception's name
    options: dict[str, Any] = field(default_factory=dict)  # RemoteLoader keyword arguments

    def __str__(self) -> str:
        return self.name


# -- parquet --------------------------------------------------------------------------------------

def _write_parquet(directory: str) -> int:
    write_indexed(directory, [9, 0, 14, 3])
    return 26


def _break_parquet(directory: str) -> str:
    write_indexed(directory, [4])
    with open(os.path.join(directory, "zz-broken.parquet"), "wb") as f:
        f.write(b"PAR1 this is not a footer")
    return r"zz-broken\.parquet.*not a readable Parquet file"


PARQUET = FormatCase("parquet", _write_parquet, lambda batch: batch["idx"].tolist(), _break_parquet,
                     "UnreadableShard")

# -- tokens ---------------------------------------------------------------------------------------

SEQ_LEN = 5
TOKEN_FILES = [203, 7, 190]  # windows run across file boundaries; the middle file starts none


def _write_tokens(directory: str) -> int:
    os.makedirs(directory, exist_ok=True)
    start = 0
    for i, count in enumerate(TOKEN_FILES):
        np.arange(start, start + count, dtype=np.uint16).tofile(os.path.join(directory, f"part-{i}.bin"))
        start += count
    return (sum(TOKEN_FILES) - 1) // SEQ_LEN


def _token_key(batch: dict[str, Any]) -> list[int]:
    ids, labels = batch["input_ids"], batch["labels"]
    assert str(ids.dtype) == "torch.int64" and tuple(ids.shape[1:]) == (SEQ_LEN,)
    assert (labels == ids + 1).all()  # labels are the window shifted by one
    assert (ids == ids[:, :1] + np.arange(SEQ_LEN)).all()  # consecutive tokens
    return (ids[:, 0] // SEQ_LEN).tolist()


def _break_tokens(directory: str) -> str:
    _write_tokens(directory)
    with open(os.path.join(directory, "part-9.bin"), "wb") as f:
        f.write(b"\x01\x00\x02")  # 3 bytes: not a whole number of uint16 tokens
    return r"part-9\.bin.*not a multiple of uint16"


TOKENS = FormatCase("tokens", _write_tokens, _token_key, _break_tokens, "UnreadableShard",
                    {"format": "tokens", "seq_len": SEQ_LEN, "dtype": "uint16"})

# -- webdataset -----------------------------------------------------------------------------------

def write_tars(directory: str, shard_samples: Sequence[int], image_size: int = 12) -> list[str]:
    """Tar shards of samples `<index>.jpg` (an image), `.cls` (the global index) and `.txt` (a
    caption), as WebDataset's TarWriter lays them out."""
    os.makedirs(directory, exist_ok=True)
    paths, start = [], 0
    for i, count in enumerate(shard_samples):
        path = os.path.join(directory, f"shard-{i:04d}.tar")
        with tarfile.open(path, "w") as tar:
            for index in range(start, start + count):
                fields = {"jpg": encode_image(image_size, image_size, index), "cls": str(index).encode(),
                          "txt": f"a picture numbered {index}".encode()}
                for field, data in fields.items():
                    member = tarfile.TarInfo(f"train/{index:06d}.{field}")
                    member.size = len(data)
                    tar.addfile(member, io.BytesIO(data))
        paths.append(path)
        start += count
    return paths


def _write_webdataset(directory: str) -> int:
    write_tars(directory, [7, 11, 5])
    return 23


def _webdataset_key(batch: dict[str, Any]) -> list[int]:
    assert tuple(batch["jpg"].shape[1:]) == (3, 8, 8)
    return batch["cls"].tolist()


def _break_webdataset(directory: str) -> str:
    path = write_tars(directory, [6])[0]
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 11000)  # past the end blocks, into the last sample
    return r"shard-0000\.tar.*truncated"


WEBDATASET = FormatCase("webdataset", _write_webdataset, _webdataset_key, _break_webdataset, "UnreadableShard",
                        {"format": "webdataset", "transform": "image", "columns": ["jpg", "cls"],
                         "transform_args": {"column": "jpg", "size": 8, "mode": "center_crop"}})

CASES = [PARQUET, TOKENS, WEBDATASET]
