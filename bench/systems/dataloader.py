"""torch DataLoader over the same Parquet shards: a map-style Dataset, Pillow decode, numpy crop/flip.

``num_workers`` = the machine's cores, ``persistent_workers=True``, ``pin_memory``
when CUDA is present, ``shuffle`` as the run asks: the configuration a careful
user would pick. The dataset reads the shards' image and label columns into
memory once, before the workers fork (the JPEG workload is 270 MB), so a
shuffled index costs no re-read and the workers share those pages: the
fastest a DataLoader over this data can be.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from torch.utils.data import DataLoader, Dataset

from bench.augment import decode_crop_flip
from bench.meter import Batch, LoaderFactory
from bench.spec import ConsumerSpec
from bench.systems.epochs import over_epochs
from bench.workload import parquet_files


class ParquetJpegDataset(Dataset[dict[str, Any]]):
    """Row i of the concatenated shards -> {"image": uint8 [3, crop, crop], "label": int}."""

    def __init__(self, files: Sequence[str], crop: int) -> None:
        self.crop = crop
        table = pa.concat_tables(pq.read_table(path, columns=["image", "label"]) for path in files)
        images = table.column("image").combine_chunks()
        if images.null_count:
            raise ValueError("the workload's image column has nulls")
        # One data buffer and its offsets: sample i is data[offsets[i]:offsets[i + 1]].
        offsets_dtype = np.int64 if pa.types.is_large_binary(images.type) else np.int32
        self._offsets = np.frombuffer(images.buffers()[1], dtype=offsets_dtype)[
            images.offset : images.offset + len(images) + 1]
        self._data = memoryview(images.buffers()[2])  # type: ignore[arg-type]
        self._labels = table.column("label").to_numpy()
        self._images = images  # keeps the buffers alive
        self._rng: np.random.Generator | None = None

    def __len__(self) -> int:
        return len(self._labels)

    def jpeg(self, index: int) -> bytes:
        """Sample `index`'s encoded image."""
        return bytes(self._data[self._offsets[index] : self._offsets[index + 1]])

    def label(self, index: int) -> int:
        return int(self._labels[index])

    def __getitem__(self, index: int) -> dict[str, Any]:
        if self._rng is None:
            self._rng = np.random.default_rng(torch.initial_seed() % 2**63)
        pixels = decode_crop_flip(self.jpeg(index), self.crop, self._rng)
        return {"image": torch.from_numpy(pixels), "label": self.label(index)}


def loader_factory(spec: ConsumerSpec) -> LoaderFactory:
    @contextlib.contextmanager
    def open_loader() -> Iterator[Iterable[Batch]]:
        dataset = ParquetJpegDataset(parquet_files_of(spec.dataset), spec.crop)
        loader = DataLoader(dataset, batch_size=spec.batch_size, shuffle=spec.shuffle,
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
