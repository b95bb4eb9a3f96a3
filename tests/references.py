"""The reference libraries the formats are compared with, and a format's samples as the service
reads them (index + every unit through the decoders' own StorageReader, no service, no Ray).

torchvision: the PyPI wheel is a CUDA build whose C++ ops cannot load beside the CPU build of
torch this project installs, and `import torchvision` then fails while registering them. The
image-folder code (`torchvision/datasets/folder.py`: `find_classes`, `make_dataset`,
`ImageFolder`) is pure Python and uses none of them, so when the package will not import, that
module of the installed release is loaded on its own, without the package's op registration.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import types
from typing import Any

import pyarrow as pa

from shardstream.service.dataset import DatasetIndex
from shardstream.service.formats import index_dataset
from shardstream.service.node.read_counters import SharedReadCounters
from shardstream.service.node.storage_reader import StorageReader


def torchvision_folder() -> types.ModuleType:
    """`torchvision.datasets.folder` of the installed torchvision."""
    try:
        return importlib.import_module("torchvision.datasets.folder")
    except (ImportError, RuntimeError, OSError):  # its ops do not load beside this torch
        for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
            del sys.modules[name]
    spec = importlib.util.find_spec("torchvision")
    assert spec is not None and spec.origin is not None, "torchvision is not installed (make setup installs it)"
    root = os.path.dirname(spec.origin)
    for name, path in (("torchvision", root), ("torchvision.datasets", os.path.join(root, "datasets"))):
        package = types.ModuleType(name)
        package.__path__ = [path]
        sys.modules[name] = package
    return importlib.import_module("torchvision.datasets.folder")


def read_all(dataset: str | tuple[str, ...], format: str, columns: tuple[str, ...] = (),
             **args: Any) -> tuple[DatasetIndex, list[dict[str, Any]]]:
    """The dataset's index and every sample as the decoders read it, in global order."""
    entries = (dataset,) if isinstance(dataset, str) else dataset
    index = index_dataset(entries, columns, format=format, format_args=args)
    storage = StorageReader(SharedReadCounters())
    tables: list[pa.Table] = []
    for shard in index.shards:
        for unit in range(len(shard.row_group_rows)):
            tables.append(storage.row_group(shard, unit, list(columns) or None))
    rows = pa.concat_tables(tables).to_pylist() if tables else []
    return index, rows


__all__ = ["read_all", "torchvision_folder"]
