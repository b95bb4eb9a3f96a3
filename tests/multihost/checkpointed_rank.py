"""A rank that checkpoints its loader with its work after every batch, and resumes from it when
started again: run on a trainer host by test_separate_hosts.py.

    checkpointed_rank.py ADDRESS DATASET OUT SECONDS_PER_BATCH EPOCHS

EPOCHS shuffled epochs (world 1, batch 3, seed 11) through RemoteLoader, sleeping between batches
like a training step. After each batch it writes OUT/checkpoint.pt in one step (written aside,
then renamed), as a training script saves its model: the batches consumed so far (the "model")
and `loader.state_dict()`; and OUT/progress, the batches this process has had. Started with a
checkpoint in OUT it loads it (`load_state_dict`), goes on from its epoch, and at the end writes
OUT/resumed.json: the batches the checkpoint held, the batches this process received, and the
wall-clock times (time.time()) at which main() began (imports done) and its first batch came.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import Any

import torch

from shardstream.client import RemoteLoader


def _save(path: str, checkpoint: dict[str, Any]) -> None:
    torch.save(checkpoint, f"{path}.tmp")
    os.replace(f"{path}.tmp", path)


def main(address: str, dataset: str, out: str, pace: str, epochs: str) -> None:
    main_at, started = time.time(), time.monotonic()
    path = os.path.join(out, "checkpoint.pt")
    restored: dict[str, Any] | None = torch.load(path) if os.path.exists(path) else None
    consumed: list[list[list[int]]] = [list(e) for e in restored["epochs"]] if restored else []
    received: list[list[list[int]]] = []
    first_batch_at = None
    with RemoteLoader(address, dataset=dataset, batch_size=3, shuffle=True, seed=11, world_size=1, rank=0,
                      timeout=120, columns=["idx"]) as loader:
        opened_s = time.monotonic() - started
        start_epoch = 0
        if restored is not None:
            loader.load_state_dict(restored["loader"])
            # the checkpoint's epoch, or the next one if it was taken at that epoch's last batch
            start_epoch = restored["epoch"] + (len(consumed[-1]) == len(loader))
        for epoch in range(start_epoch, int(epochs)):
            loader.set_epoch(epoch)
            if len(consumed) == epoch:
                consumed.append([])
            received.append([])
            for batch in loader:
                if first_batch_at is None:
                    first_batch_at = time.time()
                consumed[epoch].append(batch["idx"].tolist())
                received[-1].append(batch["idx"].tolist())
                _save(path, {"epochs": consumed, "epoch": epoch, "loader": loader.state_dict()})
                with open(os.path.join(out, "progress.tmp"), "w") as f:
                    f.write(str(sum(map(len, received))))
                os.replace(os.path.join(out, "progress.tmp"), os.path.join(out, "progress"))
                time.sleep(float(pace))
    if restored is not None:
        with open(os.path.join(out, "resumed.json"), "w") as f:
            json.dump({"restored": restored["epochs"], "start_epoch": start_epoch, "received": received,
                       "main_at": main_at, "first_batch_at": first_batch_at, "opened_s": opened_s}, f)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    main(*sys.argv[1:6])
