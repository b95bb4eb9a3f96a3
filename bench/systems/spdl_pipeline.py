"""SPDL (Meta's thread-based data loading): its image pipeline over the same Parquet rows.

As SPDL's documentation builds an image pipeline: ``PipelineBuilder`` with a
source of sample indices, a ``pipe`` that demuxes and decodes each JPEG with
FFmpeg (``spdl.io.demux_image`` + ``decode_packets``, GIL released) in
``concurrency`` = the machine's cores, an ``aggregate`` into batches, a
``pipe`` that converts the batch's frames into one buffer
(``spdl.io.convert_frames``) and a sink, built with ``num_threads`` = the
cores. The random crop and flip run in the decode's FFmpeg filter graph
(``crop=...,hflip``), drawn per sample as the other systems draw them; the
batch comes out as contiguous uint8 [B, 3, crop, crop] like theirs. The
image and label columns are read into memory once, by the DataLoader's own
dataset class. Needs FFmpeg's shared libraries (5.1 to 7: Debian's
libavcodec59 and friends); the run skips SPDL where they are missing.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import torch
from PIL import Image

from bench.meter import Batch, LoaderFactory
from bench.spec import ConsumerSpec
from bench.systems.dataloader import ParquetJpegDataset, parquet_files_of
from bench.systems.epochs import over_epochs

SINK_BATCHES = 3  # the sink's buffer, as SPDL's examples size it


def spdl_available() -> str:
    """"" when SPDL and FFmpeg's libraries work here, else why not (it decodes one small JPEG)."""
    try:
        import spdl.io
    except ImportError as exc:
        return f"SPDL is not installed ({exc}): pip install spdl"
    sample = io.BytesIO()
    Image.new("RGB", (8, 8)).save(sample, format="JPEG")
    try:
        spdl.io.decode_packets(spdl.io.demux_image(sample.getvalue()))
    except RuntimeError as exc:
        return (f"SPDL cannot load FFmpeg's shared libraries ({str(exc).splitlines()[0][:160]}): install "
                "them, e.g. apt-get install libavcodec59 libavformat59 libavfilter8")
    return ""


def loader_factory(spec: ConsumerSpec) -> LoaderFactory:
    import spdl.io
    from spdl.pipeline import PipelineBuilder

    rows = ParquetJpegDataset(parquet_files_of(spec.dataset), spec.crop)  # the bytes and labels, in memory
    crop = spec.crop
    with Image.open(io.BytesIO(rows.jpeg(0))) as first:
        width, height = first.size  # the workload's pictures are all one size

    def decode(item: tuple[int, int, int, bool]) -> tuple[Any, int]:
        index, top, left, flip = item
        packets = spdl.io.demux_image(rows.jpeg(index))
        filters = f"crop=w={crop}:h={crop}:x={left}:y={top}" + (",hflip" if flip else "") + ",format=pix_fmts=rgb24"
        return spdl.io.decode_packets(packets, filter_desc=filters), rows.label(index)

    def collate(items: list[tuple[Any, int]]) -> dict[str, torch.Tensor]:
        buffer = spdl.io.convert_frames([frames for frames, _ in items])  # [B, H, W, 3], one copy
        images = spdl.io.to_torch(buffer).permute(0, 3, 1, 2).contiguous()
        return {"image": images, "label": torch.tensor([label for _, label in items])}

    def epoch_items(epoch: int) -> Iterator[tuple[int, int, int, bool]]:
        rng = np.random.default_rng(epoch)
        order = rng.permutation(len(rows)) if spec.shuffle else np.arange(len(rows))
        for index in order:
            top = int(rng.integers(0, height - crop + 1))
            left = int(rng.integers(0, width - crop + 1))
            yield int(index), top, left, bool(rng.random() < 0.5)

    @contextlib.contextmanager
    def open_loader() -> Iterator[Iterable[Batch]]:
        def epoch(number: int) -> Iterator[Batch]:
            pipeline = (PipelineBuilder()
                        .add_source(epoch_items(number))
                        .pipe(decode, concurrency=spec.workers)
                        .aggregate(spec.batch_size)
                        .pipe(collate)
                        .add_sink(SINK_BATCHES)
                        .build(num_threads=spec.workers))
            with pipeline.auto_stop():
                yield from pipeline

        yield over_epochs(epoch, spec.epochs)

    return open_loader


__all__ = ["loader_factory", "spdl_available"]
