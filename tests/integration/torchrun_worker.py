"""Run under torchrun by test_torchrun.py: each rank records what RemoteLoader gave it.

rank and world_size are not passed: RemoteLoader must take them from the
initialised torch.distributed group.
"""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist

from shardstream.client import RemoteLoader


def main(address: str, dataset: str, out_dir: str) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    loader = RemoteLoader(address, dataset=dataset, batch_size=3, shuffle=True, seed=11, drop_last=False)
    seen: dict[str, list[list[int]]] = {}
    for epoch in range(2):
        loader.set_epoch(epoch)
        seen[str(epoch)] = [batch["idx"].tolist() for batch in loader]
    steps = torch.tensor([len(seen["0"])])
    dist.all_reduce(steps)  # a real collective: every rank must get here with the same count
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump({"world": loader.world_size, "len": len(loader), "steps_sum": int(steps),
                   "epochs": seen}, f)
    loader.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:4])
