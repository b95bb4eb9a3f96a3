"""One small dataset per format for the shared conformance suite (tests/integration/test_formats.py).

Each case writes a dataset whose samples say which global index they are, so
a batch can be checked against DataLoader + DistributedSampler's indices, and
a broken variant whose error must name the file and the cause.
"""

from __future__ import annotations

import io
import json
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
    assert batch["txt"] == [f"a picture numbered {i}" for i in batch["cls"].tolist()]  # text as list[str]
    return batch["cls"].tolist()


def _break_webdataset(directory: str) -> str:
    path = write_tars(directory, [6])[0]
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 11000)  # past the end blocks, into the last sample
    return r"shard-0000\.tar.*truncated"


WEBDATASET = FormatCase("webdataset", _write_webdataset, _webdataset_key, _break_webdataset, "UnreadableShard",
                        {"format": "webdataset", "transform": "image", "columns": ["jpg", "cls", "txt"],
                         "transform_args": {"column": "jpg", "size": 8, "mode": "center_crop"}})

# -- imagefolder ----------------------------------------------------------------------------------

def solid_png(value: int, size: int = 6) -> bytes:
    """A lossless image every pixel of which is `value`: it survives decode, crop and resize."""
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (size, size), (value, value, value)).save(buf, format="PNG")
    return buf.getvalue()


# torchvision's order: classes sorted, then each class's directories as sorted(os.walk) visits them
# (a directory's own files before its sub-directories'), files sorted by name within one.
FOLDER_ORDER = ["ant/1.png", "ant/2.jpeg", "bee/b.png", "bee/a/x.png", "bee/a/y.png", "cow/q.PNG",
                *[f"dog/{i:02d}.png" for i in range(12)]]
PIXEL_STEP = 9  # sample i's pixels are i * PIXEL_STEP


def _write_imagefolder(directory: str) -> int:
    for i, relative in enumerate(FOLDER_ORDER):
        path = os.path.join(directory, relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(solid_png(i * PIXEL_STEP))
    with open(os.path.join(directory, "bee", "notes.txt"), "w") as f:  # not an image: left out
        f.write("x")
    with open(os.path.join(directory, "stray.png"), "wb") as f:  # in no class: left out
        f.write(solid_png(255))
    return len(FOLDER_ORDER)


def _pixel_key(batch: dict[str, Any], image: str) -> list[int]:
    pixels = batch[image]
    assert tuple(pixels.shape[1:]) == (3, 4, 4)
    return (pixels[:, 0, 0, 0] // PIXEL_STEP).tolist()


def _folder_key(batch: dict[str, Any]) -> list[int]:
    keys = _pixel_key(batch, "image")
    classes = sorted({path.split("/")[0] for path in FOLDER_ORDER})
    assert batch["label"].tolist() == [classes.index(FOLDER_ORDER[k].split("/")[0]) for k in keys]
    return keys


def _break_imagefolder(directory: str) -> str:
    _write_imagefolder(directory)
    os.makedirs(os.path.join(directory, "elk"))
    with open(os.path.join(directory, "elk", "readme.md"), "w") as f:
        f.write("no images here")
    return r"class\(es\) \['elk'\] hold no image files"


IMAGE = {"transform": "image", "transform_args": {"size": 4, "mode": "center_crop", "flip": False}}
IMAGEFOLDER = FormatCase("imagefolder", _write_imagefolder, _folder_key, _break_imagefolder, "DatasetNotFound",
                         {"format": "imagefolder", **IMAGE})

# -- manifest -------------------------------------------------------------------------------------

MANIFEST_FILES = 21


def _write_manifest(directory: str, missing: int | None = None) -> int:
    os.makedirs(os.path.join(directory, "files"), exist_ok=True)
    lines = ["url,idx,caption"]
    for i in range(MANIFEST_FILES):
        name = f"files/{i:03d}.png"
        if i != missing:
            with open(os.path.join(directory, name), "wb") as f:
                f.write(solid_png(i * PIXEL_STEP))
        lines.append(f"{name},{i},picture {i}")
    with open(os.path.join(directory, "manifest.csv"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return MANIFEST_FILES


def _manifest_key(batch: dict[str, Any]) -> list[int]:
    keys = _pixel_key(batch, "image")
    assert batch["idx"].tolist() == keys
    return keys


def _break_manifest(directory: str) -> str:
    _write_manifest(directory, missing=4)
    return r"sample 4 \(file .*files/004\.png\) cannot be read: .*004\.png does not exist"


MANIFEST = FormatCase("manifest", _write_manifest, _manifest_key, _break_manifest, "CorruptSample",
                      {"format": "manifest", "columns": ["image", "idx"],
                       "transform": "image", "transform_args": {**IMAGE["transform_args"], "column": "image"}})

# -- jsonl ----------------------------------------------------------------------------------------

JSONL_FILES = [9, 0, 13, 4]  # samples per file; the second holds only blank lines


def _jsonl_line(index: int) -> str:
    return json.dumps({"idx": index, "text": f"document {index} \u00e9\u4e2d", "ids": list(range(index % 4))},
                      ensure_ascii=index % 2 == 0)


def _write_jsonl(directory: str, corrupt: int | None = None) -> int:
    os.makedirs(directory, exist_ok=True)
    start = 0
    for i, count in enumerate(JSONL_FILES):
        lines = ["", "  "] if not count else []
        for index in range(start, start + count):
            lines.append('{"idx": ' + str(index) + ', "text": "cut off' if index == corrupt else _jsonl_line(index))
            if index % 5 == 0:
                lines.append("")  # a blank line: no sample
        newline = "\r\n" if i == 2 else "\n"  # a Windows-written file reads the same
        with open(os.path.join(directory, f"part-{i:02d}.jsonl"), "w", newline="") as f:
            f.write(newline.join(lines) + (newline if i != 3 else ""))  # the last file ends without one
        start += count
    return sum(JSONL_FILES)


def _jsonl_key(batch: dict[str, Any]) -> list[int]:
    keys = batch["idx"].tolist()
    assert str(batch["idx"].dtype) == "torch.int64"
    assert batch["text"] == [json.loads(_jsonl_line(k))["text"] for k in keys]  # strings as list[str]
    lengths = batch["ids_lengths"].tolist()
    assert lengths == [k % 4 for k in keys]
    assert [row[:n] for row, n in zip(batch["ids"].tolist(), lengths, strict=True)] == [list(range(k % 4)) for k in keys]
    return keys


def _break_jsonl(directory: str) -> str:
    _write_jsonl(directory, corrupt=3)
    return r"sample 3 \(line 5 of .*part-00\.jsonl\) cannot be read: line 5 is not JSON \(Unterminated string"


JSONL = FormatCase("jsonl", _write_jsonl, _jsonl_key, _break_jsonl, "CorruptSample",
                   {"format": "jsonl", "collate": "pad"})

CASES = [PARQUET, TOKENS, WEBDATASET, IMAGEFOLDER, MANIFEST, JSONL]
