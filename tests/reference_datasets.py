"""Edge-case datasets for the reference comparisons (tests/integration/test_reference_formats.py):
tars, image folders and token files written the odd ways real ones are."""

from __future__ import annotations

import gzip
import io
import json
import os
import tarfile
from collections.abc import Sequence

import numpy as np

from tests.formats import solid_png

Member = tuple[str, bytes]  # a tar member's name and data


def npy_bytes(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


def write_tar(path: str, members: Sequence[Member], extra: Sequence[tarfile.TarInfo] = ()) -> str:
    """A tar of these regular-file members, after `extra` non-file members (directories, links)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tarfile.open(path, "w") as tar:
        for info in extra:
            tar.addfile(info)
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _not_a_file(name: str, kind: bytes, target: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info


# Shard 0: upper-case and multi-part extensions, keys with dots and directories, a sample missing
# a field, a gzipped text field, JSON, a .npy field, an unusual extension, members WebDataset skips
# (metadata, names without a dot, directories, links) and its odd parse of a hidden name.
ODD_SHARD: list[Member] = [
    ("__meta__", b"metadata, skipped"),
    ("__index__/list.txt", b"metadata too"),
    ("README", b"no dot: no field"),
    ("train/a0.JPG", solid_png(10)),
    ("train/a0.CLS", b"3"),
    ("train/a1.seg.png", solid_png(20)),
    ("train/a1.label.cls", b" 7\n"),
    ("train/a1.en.txt", "caption \u00e9".encode()),
    ("train/a1.json", json.dumps({"boxes": [[1, 2, 3, 4]], "name": "a1"}).encode()),
    ("train/a1.cls", b"1"),
    ("train/x.y/a2.jpg", solid_png(30)),
    ("train/x.y/a2.cls", b"2"),
    ("train/a3.jpg", solid_png(40)),  # no cls
    ("train/a3.txt.gz", gzip.compress(b"zipped caption", mtime=0)),
    ("train/.hidden.jpg", solid_png(50)),  # WebDataset: key 'train/', field 'hidden.jpg'
    ("train/a4.npy", npy_bytes(np.arange(6, dtype=np.int16).reshape(2, 3))),
    ("train/a4.cls", b"4"),
    ("train/a5.Weird_Ext", b"\x00\x01raw"),
    ("train/a5.cls", b"5"),
    ("./b0.jpg", solid_png(60)),
    ("./b0.cls", b"6"),
    ("train/a0.txt", b"same key again, not adjacent: a sample of its own"),
]
ODD_EXTRA = [_not_a_file("train/", tarfile.DIRTYPE), _not_a_file("train/link.jpg", tarfile.SYMTYPE, "a0.JPG")]

# Shard 1: another field set (no jpg, an id and a png), so the dataset's fields are the union.
OTHER_SHARD: list[Member] = [(f"more/c{i}.{field}", data) for i in range(3)
                             for field, data in (("png", solid_png(70 + i)), ("id", str(100 + i).encode()))]


def write_odd_tars(directory: str) -> list[str]:
    return [write_tar(os.path.join(directory, "shard-0.tar"), ODD_SHARD, ODD_EXTRA),
            write_tar(os.path.join(directory, "shard-1.tar"), OTHER_SHARD)]


def write_image_folder(root: str, elsewhere: str) -> None:
    """An image folder with everything torchvision treats its own way: a class that is a symlink
    to a directory outside the root, a symlinked sub-directory and file, hidden files and a
    hidden class, nested and oddly sorting directories, upper-case and unusual extensions."""
    def image(path: str, value: int) -> None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(solid_png(value))

    value = iter(range(1, 250, 7))
    for relative in ("ant/1.png", "ant/2.jpeg", "Bee/b.PNG", ".hidden_class/h.png", "dog/a.webp", "dog/.x.png",
                     "dog/Y.JPEG", "dog/sub/s.png", "dog/sub-2/t.png", "dog/sub/deeper/u.bmp", "dog/z.gif",
                     "dog/notes.txt", "stray.png"):
        image(os.path.join(root, relative), next(value))
    image(os.path.join(elsewhere, "cats", "c1.png"), next(value))
    image(os.path.join(elsewhere, "cats", "inner", "c2.tif"), next(value))
    image(os.path.join(elsewhere, "more", "m.jpg"), next(value))
    image(os.path.join(elsewhere, "single.png"), next(value))
    os.symlink(os.path.join(elsewhere, "cats"), os.path.join(root, "cat"))  # a class that is a link
    os.symlink(os.path.join(elsewhere, "more"), os.path.join(root, "dog", "linked"))  # a linked sub-directory
    os.symlink(os.path.join(elsewhere, "single.png"), os.path.join(root, "ant", "3-link.png"))  # a linked file


def write_token_files(directory: str) -> dict[str, np.ndarray]:
    """.npy token files in byte orders, dtypes and layouts numpy reads; name -> the array."""
    os.makedirs(directory, exist_ok=True)
    rng = np.random.default_rng(0)
    arrays = {
        "a-little.npy": rng.integers(0, 60000, 101).astype("<u2"),
        "b-big-endian.npy": rng.integers(0, 60000, 57).astype(">u2"),
        "c-2d.npy": rng.integers(0, 60000, (7, 9)).astype("<u2"),
        "d-fortran-1d.npy": np.asfortranarray(rng.integers(0, 60000, 33).astype("<u2")),
    }
    for name, array in arrays.items():
        np.save(os.path.join(directory, name), array)
    return arrays


__all__ = ["ODD_SHARD", "OTHER_SHARD", "npy_bytes", "write_image_folder", "write_odd_tars", "write_tar",
           "write_token_files"]
