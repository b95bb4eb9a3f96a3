"""One rank on a trainer host, for bench.capped_links: bytes per second, second by second.

    python -m bench.link_consumer ADDRESS DATASET ROWS SECONDS OUT.json

Pulls epoch after epoch (world 1, batch 16, shuffled, seed 0) for SECONDS, counting the bytes of
every batch it received per wall-clock second, and checks every whole epoch against
DistributedSampler's batches (torch's own): any step lost, repeated or out of order is a mismatch.
"""

from __future__ import annotations

import json
import sys
import time

from shardstream.client import RemoteLoader
from tests.datasets import oracle_batches

BATCH = 16


def main(address: str, dataset: str, rows: str, seconds: str, out: str) -> None:
    per_second: dict[int, int] = {}
    epochs_checked, mismatches = 0, 0
    started = time.monotonic()
    with RemoteLoader(address, dataset=dataset, batch_size=BATCH, shuffle=True, seed=0, world_size=1, rank=0,
                      timeout=120, prefetch=8) as loader:
        epoch = 0
        while time.monotonic() - started < float(seconds):
            loader.set_epoch(epoch)
            got = []
            for batch in loader:
                now = int(time.monotonic() - started)
                per_second[now] = per_second.get(now, 0) + sum(t.numel() * t.element_size() for t in batch.values())
                got.append(batch["idx"].tolist())
                if time.monotonic() - started >= float(seconds):
                    break
            else:
                epochs_checked += 1
                mismatches += got != oracle_batches(int(rows), 1, 0, BATCH, True, 0, False, epoch)
            epoch += 1
    with open(out, "w") as f:
        json.dump({"bytes_per_second": [per_second.get(s, 0) for s in range(int(float(seconds)) + 1)],
                   "epochs_checked": epochs_checked, "mismatches": mismatches}, f)


if __name__ == "__main__":
    main(*sys.argv[1:6])
