"""``python -m bench.tokens``: token windows for LLM training, shardstream against a DataLoader.

A nanoGPT-style dataset (uint16 ``.bin`` files) read as windows of
``seq_len + 1`` tokens, shuffled with DistributedSampler's order, one rank:

- **shardstream**: ``RemoteLoader(format="tokens", seq_len=L, dtype="uint16")``
  against a local service (2 decode actors), epoch 0 (storage) and epoch 1
  (the node's local copy);
- **DataLoader**: a map-style dataset over ``np.memmap`` of the same files
  (what nanoGPT's ``get_batch`` reads), ``DistributedSampler`` order,
  ``num_workers=2``, windows widened to int64 in the workers.

Both deliver the same batches (``input_ids``, ``labels``: int64 [B, L]); the
script checks the first batch is equal and prints samples/s and the ratio per
repetition. Windows are tiny to decode, so this measures the per-batch cost of
each path, not decode capacity.
"""

from __future__ import annotations

import argparse
import bisect
import logging
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from bench.services import shardstream_service

log = logging.getLogger(__name__)

FILES = 4


class TokenWindows(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    """Window i of the files concatenated in sorted order, as nanoGPT slices its memmap."""

    def __init__(self, paths: Sequence[Path], seq_len: int) -> None:
        self.paths, self.seq_len = list(paths), seq_len
        self.maps: list[np.memmap] | None = None
        sizes = [p.stat().st_size // 2 for p in self.paths]
        self.starts = np.concatenate([[0], np.cumsum(sizes)]).tolist()
        self.n = (self.starts[-1] - 1) // seq_len

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        if self.maps is None:  # opened in each worker
            self.maps = [np.memmap(p, dtype=np.uint16, mode="r") for p in self.paths]
        begin, end = i * self.seq_len, i * self.seq_len + self.seq_len + 1
        parts, at = [], begin
        while at < end:
            f = bisect.bisect_right(self.starts, at) - 1
            take = min(end, self.starts[f + 1]) - at
            parts.append(self.maps[f][at - self.starts[f]: at - self.starts[f] + take])
            at += take
        window = torch.from_numpy(np.concatenate(parts).astype(np.int64))
        return {"input_ids": window[:-1], "labels": window[1:]}


def write_tokens(directory: Path, tokens: int) -> list[Path]:
    rng = np.random.default_rng(0)
    paths = []
    for i in range(FILES):
        path = directory / f"train-{i:03d}.bin"
        rng.integers(0, 50257, tokens // FILES, dtype=np.uint16).tofile(path)
        paths.append(path)
    return paths


def time_epoch(batches: object, limit: int) -> tuple[float, dict[str, torch.Tensor]]:
    """Samples/s over `limit` batches (after the first, which includes start-up), and the first batch."""
    it = iter(batches)  # type: ignore[call-overload]
    first = next(it)
    samples, started = 0, time.perf_counter()
    for step, batch in enumerate(it):
        samples += len(batch["input_ids"])
        if step + 2 >= limit:
            break
    return samples / (time.perf_counter() - started), first


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tokens", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=64_000_000)
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--batches", type=int, default=1500, help="batches timed per epoch")
    parser.add_argument("--repetitions", type=int, default=3)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    from torch.utils.data import DataLoader, DistributedSampler

    from shardstream.client import RemoteLoader

    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        (work / "data").mkdir()
        paths = write_tokens(work / "data", args.tokens)
        rows = []
        with shardstream_service(2, work, config={"local_copy_dir": str(work / "copy")}) as server:
            address = f"127.0.0.1:{server.announced}"
            for repetition in range(args.repetitions):
                dataset = TokenWindows(paths, args.seq_len)
                sampler = DistributedSampler(dataset, num_replicas=1, rank=0, shuffle=True, seed=repetition)
                loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, num_workers=2,
                                    persistent_workers=False)
                dl_rate, dl_first = time_epoch(loader, args.batches)
                with RemoteLoader(address, dataset=str(work / "data"), format="tokens", seq_len=args.seq_len,
                                  dtype="uint16", batch_size=args.batch_size, shuffle=True, seed=repetition,
                                  world_size=1, rank=0, job_name=f"tokens-{repetition}") as remote:
                    rates = []
                    for epoch in range(2):
                        remote.set_epoch(epoch)
                        rate, first = time_epoch(remote, args.batches)
                        rates.append(rate)
                        if epoch == 0:
                            assert torch.equal(first["input_ids"], dl_first["input_ids"]), "different batches"
                            assert torch.equal(first["labels"], dl_first["labels"]), "different labels"
                rows.append((dl_rate, *rates))
                print(f"repetition {repetition}: DataLoader {dl_rate:,.0f} samples/s; shardstream epoch 0 "
                      f"{rates[0]:,.0f} ({rates[0] / dl_rate:.2f}x), epoch 1 {rates[1]:,.0f} "
                      f"({rates[1] / dl_rate:.2f}x)", flush=True)
        ratios0 = [r[1] / r[0] for r in rows]
        ratios1 = [r[2] / r[0] for r in rows]
        print(f"median over {len(rows)}: shardstream / DataLoader = {statistics.median(ratios0):.2f}x (epoch 0), "
              f"{statistics.median(ratios1):.2f}x (epoch 1); seq_len {args.seq_len}, batch {args.batch_size}, "
              f"{args.tokens:,} tokens")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
