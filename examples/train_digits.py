"""Train a small MLP on the digits dataset with DDP, fed by a shardstream service.

    torchrun --nproc-per-node 2 examples/train_digits.py \\
        --address HOST:PORT --data .demo/digits --epochs 5 --batch-size 32

Each rank iterates a RemoteLoader in place of DataLoader + DistributedSampler:
same batches, same order, but decoded by the service's Ray actors. Rank 0
prints one line per epoch (mean train loss, test accuracy, global samples/s
and the fraction of the epoch spent waiting for data) and a final summary.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow.parquet as pq
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from shardstream.client import RemoteLoader

FEATURES = 64
CLASSES = 10


@dataclass
class EpochStats:
    """What one rank measured in one epoch; reduce() combines them across ranks."""

    loss_sum: float = 0.0
    samples: int = 0
    wait_s: float = 0.0
    elapsed_s: float = 0.0

    def reduce(self) -> tuple[float, int, float, float]:
        """(mean loss, global samples, max epoch seconds, max wait fraction) over all ranks.

        Max, not mean, for time: the slowest rank sets the pace of a DDP step.
        """
        sums = torch.tensor([self.loss_sum, float(self.samples)], dtype=torch.float64)
        fraction = self.wait_s / self.elapsed_s if self.elapsed_s > 0 else 0.0
        maxes = torch.tensor([self.elapsed_s, fraction], dtype=torch.float64)
        dist.all_reduce(sums, op=dist.ReduceOp.SUM)
        dist.all_reduce(maxes, op=dist.ReduceOp.MAX)
        loss_sum, samples = sums.tolist()
        elapsed, wait_fraction = maxes.tolist()
        return loss_sum / max(samples, 1.0), int(samples), elapsed, wait_fraction


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", required=True, help="host:port of the shardstream service")
    parser.add_argument("--data", required=True, help="dataset directory from build_digits.py")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--lr", type=float, default=1e-2, help="Adam learning rate")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.epochs < 1 or args.batch_size < 1:
        parser.error("--epochs and --batch-size must be >= 1")
    return args


def setup_device() -> torch.device:
    """One GPU per rank when there are GPUs (gloo still works there), else the CPU."""
    if torch.cuda.is_available():
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def build_model(device: torch.device, seed: int) -> DistributedDataParallel:
    """A two-layer MLP; seeded so reruns are comparable (DDP also broadcasts rank 0's weights)."""
    torch.manual_seed(seed)
    model = nn.Sequential(
        nn.Linear(FEATURES, 128), nn.ReLU(),
        nn.Linear(128, CLASSES),
    ).to(device)
    device_ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=device_ids)


def load_test_split(data: str, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The held-out split, read with pyarrow directly: it is small, and a second RemoteLoader
    in the same torchrun job would need its own job name."""
    table = pq.read_table(os.path.join(data, "test"), columns=["pixels", "label"])
    flat = table.column("pixels").combine_chunks().flatten().to_numpy()
    pixels = torch.from_numpy(flat.reshape(-1, FEATURES).copy())
    labels = torch.from_numpy(table.column("label").to_numpy().copy())
    return pixels.to(device), labels.to(device)


def train_epoch(model: nn.Module, loader: RemoteLoader, optimizer: torch.optim.Optimizer,
                device: torch.device, epoch: int) -> EpochStats:
    """One pass over this rank's batches; the time spent includes opening the stream."""
    model.train()
    loss_fn = nn.CrossEntropyLoss()
    stats = EpochStats()
    start = time.perf_counter()
    waited = loader.stats.wait_seconds  # the time the loop sat blocked on the loader, so far
    loader.set_epoch(epoch)
    for batch in loader:
        pixels = batch["pixels"].to(device, non_blocking=True)
        labels = batch["label"].to(device, non_blocking=True)
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(pixels), labels)
        loss.backward()
        optimizer.step()
        stats.loss_sum += loss.item() * labels.numel()
        stats.samples += labels.numel()
    stats.elapsed_s = time.perf_counter() - start
    stats.wait_s = loader.stats.wait_seconds - waited
    return stats


@torch.no_grad()
def accuracy(model: nn.Module, pixels: torch.Tensor, labels: torch.Tensor) -> float:
    """Test accuracy of the unwrapped model: no DDP forward, so no cross-rank coupling."""
    model.eval()
    predicted = model(pixels).argmax(dim=1)
    return (predicted == labels).float().mean().item()


def run(args: argparse.Namespace) -> None:
    """Train, evaluating on rank 0 after every epoch."""
    rank = dist.get_rank()
    device = setup_device()
    model = build_model(device, args.seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    test_pixels, test_labels = load_test_split(args.data, device)
    loader = RemoteLoader(args.address, dataset=f"{args.data}/train", batch_size=args.batch_size,
                          shuffle=True, seed=args.seed, drop_last=True, columns=["pixels", "label"])
    if rank == 0:
        print(f"world {dist.get_world_size()}, device {device}: {loader.num_samples} train samples, "
              f"{len(loader)} batches of {args.batch_size} per rank per epoch", flush=True)
    acc, total_samples, total_s, waits = 0.0, 0, 0.0, []
    with loader:
        for epoch in range(args.epochs):
            loss, samples, elapsed, wait_fraction = train_epoch(
                model, loader, optimizer, device, epoch).reduce()
            total_samples, total_s = total_samples + samples, total_s + elapsed
            waits.append(wait_fraction)
            if rank == 0:
                acc = accuracy(model.module, test_pixels, test_labels)
                print(f"epoch {epoch}: loss {loss:.4f}  test acc {acc:.4f}  "
                      f"{samples / elapsed:,.0f} samples/s  data wait {wait_fraction:.1%}", flush=True)
            # Keep rank 0's evaluation out of the other ranks' next epoch time.
            dist.barrier()
    if rank == 0:
        print(f"done: {args.epochs} epochs, {total_samples} samples in {total_s:.2f} s "
              f"({total_samples / total_s:,.0f} samples/s), final test acc {acc:.4f}, "
              f"mean data wait {sum(waits) / len(waits):.1%}", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    dist.init_process_group("gloo")
    try:
        run(args)
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
