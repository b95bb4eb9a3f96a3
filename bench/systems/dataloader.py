"""torch DataLoader over the same Parquet shards: a map-style Dataset, Pillow decode, numpy crop/flip.

``num_workers`` = the machine's cores, ``persistent_workers=True``, ``pin_memory``
when CUDA is present: the configuration a careful user would pick. Each worker
reads whole row groups (the Parquet unit of I/O) and keeps the last few, so
consecutive indices do not re-read a row group.
"""

from __future__ import annotations

import bisect
import contextlib
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import torch
from torch.utils.data import DataLoader, Dataset

from bench.augment import decode_crop_flip
from bench.meter import Batch, LoaderFactory
from bench.spec import ConsumerSpec
from bench.systems.epochs import over_epochs
from bench.workload import parquet_files

ROW_GROUPS_KEPT = 4


class ParquetJpegDataset(Dataset[dict[str, Any]]):
    """Row i of the concatenated shards -> {"image": uint8 [3, crop, crop], "label": int}."""

    def __init__(self, files: Sequence[str], crop: int) -> None:
        self.files = list(files)
        self.crop = crop
        self._starts: list[int] = []  # global index of each row group's first row
        self._groups: list[tuple[int, int]] = []  # (file, row group)
        total = 0
        for file_id, path in enumerate(self.files):
            meta = pq.ParquetFile(path).metadata
            for rg in range(meta.num_row_groups):
                self._starts.append(total)
                self._groups.append((file_id, rg))
                total += meta.row_group(rg).num_rows
        self._len = total
        # Opened lazily in each worker process.
        self._open: dict[int, pq.ParquetFile] = {}
        self._cache: OrderedDict[int, tuple[list[bytes], np.ndarray]] = OrderedDict()
        self._rng: np.random.Generator | None = None

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, index: int) -> dict[str, Any]:
        group = bisect.bisect_right(self._starts, index) - 1
        images, labels = self._row_group(group)
        row = index - self._starts[group]
        if self._rng is None:
            self._rng = np.random.default_rng(torch.initial_seed() % 2**63)
        pixels = decode_crop_flip(images[row], self.crop, self._rng)
        return {"image": torch.from_numpy(pixels), "label": int(labels[row])}

    def _row_group(self, group: int) -> tuple[list[bytes], np.ndarray]:
        cached = self._cache.get(group)
        if cached is not None:
            self._cache.move_to_end(group)
            return cached
        file_id, rg = self._groups[group]
        pf = self._open.get(file_id)
        if pf is None:
            pf = self._open[file_id] = pq.ParquetFile(self.files[file_id])
        table = pf.read_row_group(rg, columns=["image", "label"])
        entry = (table.column("image").to_pylist(), table.column("label").to_numpy())
        self._cache[group] = entry
        while len(self._cache) > ROW_GROUPS_KEPT:
            self._cache.popitem(last=False)
        return entry


def loader_factory(spec: ConsumerSpec) -> LoaderFactory:
    @contextlib.contextmanager
    def open_loader() -> Iterator[Iterable[Batch]]:
        dataset = ParquetJpegDataset(parquet_files_of(spec.dataset), spec.crop)
        loader = DataLoader(dataset, batch_size=spec.batch_size, shuffle=False,
                            num_workers=spec.workers, persistent_workers=spec.workers > 0,
                            pin_memory=torch.cuda.is_available())
        # Persistent workers stop with the loader's iterator, at the latest when the process exits.
        yield over_epochs(lambda _: loader, spec.epochs)

    return open_loader


def parquet_files_of(directory: str) -> list[str]:
    files = parquet_files(Path(directory))
    if not files:
        raise FileNotFoundError(f"no Parquet files in {directory}")
    return files


__all__ = ["ParquetJpegDataset", "loader_factory"]
