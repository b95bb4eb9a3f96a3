"""torchvision's ImageFolder on any fsspec URL: one sub-directory per class, label = class position.

As ``torchvision.datasets.ImageFolder(root)`` orders them: classes are the
root's sub-directories sorted by name (label = position), samples each
class's image files (searched recursively), directory by directory in sorted
order, files sorted by name within a directory (folder_listing.py). Symlinks
are followed as torchvision follows them (class directories, sub-directories,
files), hidden files and directories count, and only image extensions
torchvision accepts do; files directly under the root belong to no class and
are left out. A sample is ``image`` (the file's bytes: use
``transform="image"``) and ``label`` (int64).

The listing (a walk of each class on a local filesystem, one recursive list
of the root on an object store, with each file's size and version: a link's
are its target's) is made when the job opens; the decoders fetch the bytes.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

import pyarrow as pa

from shardstream.proto.errors import DatasetNotFound, InvalidJobSpec
from shardstream.service.dataset import DatasetIndex, Shard, check_columns, file_version, filesystem
from shardstream.service.formats.base import Allow, UnitStorage, take_args
from shardstream.service.formats.files import file_shards, read_file_unit
from shardstream.service.formats.folder_listing import (
    IMG_EXTENSIONS,
    list_class_files,
    list_classes,
    real_root,
)

log = logging.getLogger(__name__)



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
        classes = list_classes(fs, root)  # hidden ones and links to directories too, as torchvision
        if not classes:
            raise DatasetNotFound(f"image folder {root_url!r} has no class sub-directories")
        by_class = list_class_files(fs, root, classes)
        empty = [c for c in classes if not by_class[c]]
        if empty:
            raise DatasetNotFound(f"image folder {root_url!r}: class(es) {empty[:5]} hold no image files "
                                  f"({', '.join(IMG_EXTENSIONS)})")
        urls, versions, sizes, labels = [], [], [], []
        inside = f"{real_root(fs, root)}/"
        for label, name in enumerate(classes):
            for listed in by_class[name]:
                url = fs.unstrip_protocol(listed.path)
                allow(url)
                if not listed.target.startswith(inside):  # a link out of the folder: its target is checked too
                    allow(fs.unstrip_protocol(listed.target))
                urls.append(url)
                versions.append(file_version(listed.info) if listed.info is not None else "")
                sizes.append(listed.size)
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



__all__ = ["IMG_EXTENSIONS", "ImageFolderFormat"]
