"""What the format examples share: their command line, and a loop that shows what arrives."""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable
from typing import Any

from shardstream.client import RemoteLoader


def run(description: str, write_sample: Callable[[str], str],
        on_batch: Callable[[dict[str, Any]], None] | None = None, **loader_args: Any) -> None:
    """Parse --address/--data; with no --data, write a small sample dataset first. Then read two
    epochs through the service as rank 0 of 1 and print each batch's fields (and `on_batch`'s
    lines for each epoch's first batch)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--address", required=True, help="host:port of a shardstream service")
    parser.add_argument("--data", help="the dataset (any fsspec URL the service can read); "
                                       "default: a small one written to a temporary directory")
    parser.add_argument("--batch-size", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        data = args.data or write_sample(scratch)
        with RemoteLoader(args.address, dataset=data, batch_size=args.batch_size, world_size=1, rank=0,
                          **loader_args) as loader:
            print(f"{len(loader)} batches per epoch from {loader.num_samples} samples")
            for epoch in range(2):
                loader.set_epoch(epoch)
                for step, batch in enumerate(loader):
                    if step == 0:
                        print(f"epoch {epoch}, first batch: " + ", ".join(
                            f"{name} {describe(value)}" for name, value in batch.items()))
                        show(batch)
                        if on_batch is not None:
                            on_batch(batch)


def describe(value: Any) -> str:
    if hasattr(value, "shape"):
        return f"{value.dtype} {list(value.shape)}"
    return f"list of {len(value)} {type(value[0]).__name__ if value else ''}"


def show(batch: dict[str, Any]) -> None:
    for name, value in batch.items():
        if not hasattr(value, "shape"):
            print(f"  {name}: {value[:2]}")
        elif value.ndim == 1:
            print(f"  {name}: {value.tolist()[:8]}")
        elif value.ndim == 2:
            print(f"  {name}[0]: {value[0].tolist()[:8]}")
