"""One rank on a trainer host, for bench.capped_links: bytes and samples per second, second by second.

    python -m bench.link_consumer ADDRESS DATASET ROWS SECONDS OUT.json [PREFETCH]

Pulls epoch after epoch (world 1, batch 16, shuffled, seed 0, a window of PREFETCH batches,
8 when not given) for SECONDS, counting the bytes and samples of every batch it received per
wall-clock second, and checks every epoch (the last as far as it got) against DistributedSampler's batches (torch's
own): any step lost, repeated or out of order is a mismatch. Second s of the counts is
[started + s, started + s + 1) on the machine's monotonic clock, which every namespace shares, so
the caller can line its CPU samples up with them. ``epoch_gap_s``: each epoch after the first,
from the last batch of the one before to its first.
"""

from __future__ import annotations

import json
import sys
import time

from shardstream.client import RemoteLoader
from tests.datasets import oracle_batches

BATCH = 16


def main(address: str, dataset: str, rows: str, seconds: str, out: str, prefetch: str = "8") -> None:
    per_second: dict[int, int] = {}
    samples: dict[int, int] = {}
    epochs_checked, mismatches = 0, 0
    epoch_gap_s: list[float] = []
    last_batch_at: float | None = None
    started = time.monotonic()
    with RemoteLoader(address, dataset=dataset, batch_size=BATCH, shuffle=True, seed=0, world_size=1, rank=0,
                      timeout=120, prefetch=int(prefetch)) as loader:
        epoch = 0
        while time.monotonic() - started < float(seconds):
            loader.set_epoch(epoch)
            got = []
            for batch in loader:
                if not got and last_batch_at is not None:
                    epoch_gap_s.append(time.monotonic() - last_batch_at)
                now = int(time.monotonic() - started)
                per_second[now] = per_second.get(now, 0) + sum(t.numel() * t.element_size() for t in batch.values())
                samples[now] = samples.get(now, 0) + len(batch["idx"])
                got.append(batch["idx"].tolist())
                last_batch_at = time.monotonic()
                if last_batch_at - started >= float(seconds):
                    break
            # Every epoch against DistributedSampler's, the last one as far as the run got.
            epochs_checked += 1
            mismatches += got != oracle_batches(int(rows), 1, 0, BATCH, True, 0, False, epoch)[:len(got)]
            epoch += 1
    whole = range(int(float(seconds)) + 1)
    with open(out, "w") as f:
        json.dump({"bytes_per_second": [per_second.get(s, 0) for s in whole],
                   "samples_per_second": [samples.get(s, 0) for s in whole], "started_monotonic": started,
                   "epoch_gap_s": epoch_gap_s, "epochs_checked": epochs_checked, "mismatches": mismatches}, f)


if __name__ == "__main__":
    main(*sys.argv[1:7])
