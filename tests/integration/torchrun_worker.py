"""Run under torchrun by test_torchrun.py: each rank records what its RemoteLoaders gave it.

rank and world_size are not passed, nor job names: RemoteLoader takes the rank and world size
from the initialised torch.distributed group, and tells its loaders' jobs apart by itself.

    torchrun_worker.py ADDRESS TRAIN VAL OUT full     # a train and a validation loader, two epochs
    torchrun_worker.py ADDRESS TRAIN VAL OUT save     # two train batches, then rank 0 saves the state
    torchrun_worker.py ADDRESS TRAIN VAL OUT resume   # at this world size, the rest of that epoch
"""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist

from shardstream.client import RemoteLoader

GLOBAL_BATCH = 6  # batch size x world size, the same at every world size (elastic resume)


def main(address: str, train: str, val: str, out_dir: str, mode: str) -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    loader = RemoteLoader(address, dataset=train, batch_size=GLOBAL_BATCH // world, shuffle=True, seed=11,
                          drop_last=False)
    record: dict[str, object] = {"world": loader.world_size, "len": len(loader)}
    if mode == "full":
        validation = RemoteLoader(address, dataset=val, batch_size=5, shuffle=False)
        seen: dict[str, list[list[int]]] = {}
        for epoch in range(2):
            loader.set_epoch(epoch)
            seen[str(epoch)] = [batch["idx"].tolist() for batch in loader]
            seen[f"val{epoch}"] = [batch["idx"].tolist() for batch in validation]
        steps = torch.tensor([len(seen["0"])])
        dist.all_reduce(steps)  # a real collective: every rank must get here with the same count
        record.update(steps_sum=int(steps), epochs=seen)
        validation.close()
    elif mode == "save":
        loader.set_epoch(0)
        batches = iter(loader)
        record["batches"] = [next(batches)["idx"].tolist() for _ in range(2)]
        if rank == 0:
            torch.save(loader.state_dict(), os.path.join(out_dir, "state.pt"))
        dist.barrier()
    else:
        loader.load_state_dict(torch.load(os.path.join(out_dir, "state.pt")))
        loader.set_epoch(0)
        record["batches"] = [batch["idx"].tolist() for batch in loader]
    with open(os.path.join(out_dir, f"{mode}-rank{rank}.json"), "w") as f:
        json.dump(record, f)
    loader.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:6])
