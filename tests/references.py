"""The reference libraries the formats are compared with, and a format's samples as the service
reads them (index + every unit through the decoders' own StorageReader, no service, no Ray).

torchvision: the PyPI wheel is a CUDA build whose C++ ops cannot load beside the CPU build of
torch this project installs, and `import torchvision` then fails while registering them. The
image-folder code (`torchvision/datasets/folder.py`: `find_classes`, `make_dataset`,
`ImageFolder`) is pure Python and uses none of them, so `make setup` installs the release into
a directory of its own (.venv/references, not the environment, where a torchvision that fails
to import would break other packages' optional imports) and that module is loaded from there.
"""

from __future__ import annotations

import importlib
import os
import sys
import types
from typing import Any

import pyarrow as pa

from shardstream.service.dataset import DatasetIndex
from shardstream.service.formats import index_dataset
from shardstream.service.node.read_counters import SharedReadCounters
from shardstream.service.node.storage_reader import StorageReader

REFERENCES = os.path.join(sys.prefix, "references")  # .venv/references: the Makefile's REFERENCES


def torchvision_folder() -> types.ModuleType:
    """`torchvision.datasets.folder` of the torchvision that `make setup` put in .venv/references."""
    root = os.path.join(REFERENCES, "torchvision")
    assert os.path.isdir(os.path.join(root, "datasets")), f"torchvision is not in {REFERENCES} (make setup puts it there)"
    for name, path in (("torchvision", root), ("torchvision.datasets", os.path.join(root, "datasets"))):
        if name not in sys.modules:  # its package __init__ would load the ops: only the folders
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
