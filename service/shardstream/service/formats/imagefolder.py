"""torchvision's ImageFolder on any fsspec URL: one sub-directory per class, label = class position.

As ``torchvision.datasets.ImageFolder(root)`` orders them: classes are the
root's sub-directories sorted by name (label = position), samples each
class's image files (searched recursively), directory by directory in sorted
order, files sorted by name within a directory. Only image extensions
torchvision accepts count; files directly under the root belong to no class
and are left out. A sample is ``image`` (the file's bytes: use
``transform="image"``) and ``label`` (int64).

The listing (one recursive list of the root, with each file's size and
version) is made when the job opens; the decoders fetch the bytes.
"""

from __future__ import annotations

import hashlib
import logging
import posixpath
from typing import Any

import pyarrow as pa

from shardstream.proto.errors import DatasetNotFound, InvalidJobSpec
from shardstream.service.dataset import DatasetIndex, Shard, check_columns, file_version, filesystem
from shardstream.service.formats.base import Allow, UnitStorage, take_args
from shardstream.service.formats.files import file_shards, read_file_unit

log = logging.getLogger(__name__)

IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")  # torchvision's


class ImageFolderFormat:
    name = "imagefolder"

    def index(self, dataset: tuple[str, ...], args: dict[str, Any], columns: tuple[str, ...],
              allow: Allow) -> DatasetIndex:
        take_args(self.name, args, {})
        if len(dataset) != 1:
            raise InvalidJobSpec(f"format 'imagefolder' reads one root directory, got {len(dataset)}: {list(dataset)}")
        root_url = dataset[0]
        allow(root_url)
        fs, root = filesystem(root_url)
        root = root.rstrip("/")
        if not fs.isdir(root):
            raise DatasetNotFound(f"image folder {root_url!r} is not a directory")
        listed = fs.find(root, detail=True)
        by_class: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
        for path, info in listed.items():
            relative = path[len(root):].lstrip("/")
            if "/" not in relative or not relative.lower().endswith(IMG_EXTENSIONS):
                continue
            name = relative.split("/", 1)[0]
            by_class.setdefault(name, []).append((posixpath.dirname(path), posixpath.basename(path), info))
        classes = sorted(_class_dirs(fs, root))  # hidden ones too, as torchvision lists them
        if not classes:
            raise DatasetNotFound(f"image folder {root_url!r} has no class sub-directories")
        empty = [c for c in classes if c not in by_class]
        if empty:
            raise DatasetNotFound(f"image folder {root_url!r}: class(es) {empty[:5]} hold no image files "
                                  f"({', '.join(IMG_EXTENSIONS)})")
        urls, versions, sizes, labels = [], [], [], []
        for label, name in enumerate(classes):
            for directory, base, info in sorted(by_class[name], key=lambda f: (f[0], f[1])):
                url = fs.unstrip_protocol(f"{directory}/{base}")
                allow(url)
                urls.append(url)
                versions.append(file_version(info))
                sizes.append(int(info.get("size") or 0))
                labels.append(label)
        log.info("listed image folder %s: %d classes, %d images", root_url, len(classes), len(urls))
        where = fs.unstrip_protocol(root)
        identity = hashlib.sha256("\0".join(classes).encode()).hexdigest()[:16]
        shards = file_shards(self.name, where, urls, versions, sizes, pa.table({"label": pa.array(labels, pa.int64())}),
                             "image", identity)
        schema = check_columns(pa.schema([("image", pa.binary()), ("label", pa.int64())]), columns,
                               f"image folder {root_url!r}")
        return DatasetIndex(shards=shards, schema=schema, format=self.name)

    def read_unit(self, shard: Shard, unit: int, columns: tuple[str, ...] | None,
                  storage: UnitStorage) -> pa.Table:
        return read_file_unit(shard, unit, columns, storage)


def _class_dirs(fs: Any, root: str) -> list[str]:
    return [posixpath.basename(entry["name"].rstrip("/")) for entry in fs.ls(root, detail=True)
            if entry.get("type") == "directory"]


__all__ = ["IMG_EXTENSIONS", "ImageFolderFormat"]
