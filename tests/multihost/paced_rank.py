"""One rank that takes its time: run on a trainer host by test_separate_hosts.py.

    paced_rank.py ADDRESS DATASET OUT SECONDS_PER_BATCH [EPOCHS]

Pulls EPOCHS (default 1) shuffled epochs (world 1, batch 3, seed 11) through RemoteLoader, sleeping
between batches like a training step; after each batch it rewrites OUT/progress (the batches so
far), so the test can cut a link mid-epoch; at the end OUT/epoch.json holds every epoch's batches
and each batch's time.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time

from shardstream.client import RemoteLoader


def main(address: str, dataset: str, out: str, pace: str, epochs: str = "1") -> None:
    started = time.monotonic()
    batches: list[list[list[int]]] = []
    times: list[float] = []
    with RemoteLoader(address, dataset=dataset, batch_size=3, shuffle=True, seed=11, world_size=1, rank=0,
                      timeout=120, columns=["idx"]) as loader:
        for epoch in range(int(epochs)):
            loader.set_epoch(epoch)
            batches.append([])
            for batch in loader:
                batches[-1].append(batch["idx"].tolist())
                times.append(time.monotonic() - started)
                with open(os.path.join(out, "progress.tmp"), "w") as f:
                    f.write(str(len(times)))
                os.replace(os.path.join(out, "progress.tmp"), os.path.join(out, "progress"))
                time.sleep(float(pace))
        refetched, lost = loader.stats.steps_refetched, loader.stats.decoders_lost
    with open(os.path.join(out, "epoch.json"), "w") as f:
        json.dump({"epochs": batches, "times": times, "refetched": refetched, "decoders_lost": lost}, f)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    main(*sys.argv[1:6])
