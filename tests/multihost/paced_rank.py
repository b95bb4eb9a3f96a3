"""One rank that takes its time: run on a trainer host by test_link_faults.py.

    paced_rank.py ADDRESS DATASET OUT SECONDS_PER_BATCH

Pulls one shuffled epoch (world 1, batch 3, seed 11) through RemoteLoader, sleeping between
batches like a training step; after each batch it rewrites OUT/progress (the batches so far), so
the test can cut a link mid-epoch; at the end OUT/epoch.json holds every batch and its time.
"""

from __future__ import annotations

import json
import os
import sys
import time

from shardstream.client import RemoteLoader


def main(address: str, dataset: str, out: str, pace: str) -> None:
    started = time.monotonic()
    batches, times = [], []
    with RemoteLoader(address, dataset=dataset, batch_size=3, shuffle=True, seed=11, world_size=1, rank=0,
                      timeout=120, columns=["idx"]) as loader:
        loader.set_epoch(0)
        for batch in loader:
            batches.append(batch["idx"].tolist())
            times.append(time.monotonic() - started)
            with open(os.path.join(out, "progress.tmp"), "w") as f:
                f.write(str(len(batches)))
            os.replace(os.path.join(out, "progress.tmp"), os.path.join(out, "progress"))
            time.sleep(float(pace))
        refetched = loader.stats.steps_refetched
    with open(os.path.join(out, "epoch.json"), "w") as f:
        json.dump({"batches": batches, "times": times, "refetched": refetched}, f)


if __name__ == "__main__":
    main(*sys.argv[1:5])
