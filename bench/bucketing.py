"""``python -m bench.bucketing``: the padding ``bucket_by`` saves, from the plan itself.

For lognormal sample lengths (token counts of documents, say) it builds each
epoch plan with and without length bucketing and prints the padding a
``collate="pad"`` batch then carries: (batch size x longest - sum of lengths)
over the sum of lengths, for several bucket windows. No service is needed:
the plan is the service's own (plan.py), and the padding follows from it.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import numpy as np

from shardstream.service.plan import EpochPlan, SamplingSpec

WINDOWS = (8, 64, 512)


def padding(spec: SamplingSpec, lengths: np.ndarray, epoch: int = 0) -> float:
    """Padding over real tokens in rank 0's batches of one epoch."""
    plan = EpochPlan(spec, epoch)
    padded = real = 0
    for step in range(spec.batches_per_rank):
        batch = lengths[plan.batch_indices(0, step)]
        padded += int(batch.max()) * len(batch)
        real += int(batch.sum())
    return (padded - real) / real


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.bucketing", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=65536)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--median", type=float, default=400.0, help="median sample length")
    args = parser.parse_args(argv)
    print(f"padding / real tokens, {args.samples} samples, batch {args.batch_size}, lognormal lengths "
          f"(median {args.median:g})")
    print(f"{'sigma':>6} {'no bucketing':>13}" + "".join(f" {'window ' + str(w):>11}" for w in WINDOWS))
    for sigma in (0.5, 0.8, 1.2):
        lengths = np.maximum(1, np.random.default_rng(0).lognormal(np.log(args.median), sigma, args.samples))
        lengths = lengths.astype("<i8")
        plain = SamplingSpec(args.samples, 1, args.batch_size, True, 0, True)
        row = [padding(plain, lengths)]
        for window in WINDOWS:
            row.append(padding(SamplingSpec(args.samples, 1, args.batch_size, True, 0, True,
                                            lengths=lengths.tobytes(), bucket_window=window), lengths))
        print(f"{sigma:>6} " + " ".join(f"{value:>{13 if i == 0 else 11}.3f}" for i, value in enumerate(row)))


if __name__ == "__main__":
    main()
