"""A mixture's epoch written from its definition (docs/mixtures.md), place by place, for tests to
compare the service's order with; split across ranks by torch's own DistributedSampler."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch.utils.data import DistributedSampler


def oracle_sources(sizes: Sequence[int], phases: Sequence[tuple[int, Sequence[float]]], length: int, seed: int,
                   epoch: int, places_per_step: int, first_place: int = 0) -> list[int]:
    """Which source each place draws from: each source's cumulative weight, place by place, and a
    draw wherever it reaches k + u_s."""
    events = []
    for s, size in enumerate(sizes):
        if size <= 0:
            continue
        u = np.random.default_rng([seed, epoch, s, 0x6D69]).random()
        total, k = 0.0, 0
        for p in range(length + len(sizes)):  # past `length` until there are `length` draws
            step = (first_place + p) // places_per_step
            weights = [w for start, w in phases if start <= step][-1]
            w = weights[s] / sum(w for w, n in zip(weights, sizes, strict=True) if n > 0)
            while w > 0 and total + w >= k + u - 1e-12:  # k + u reached within place p
                events.append((p + (k + u - total) / w, s))
                k += 1
            total += w
    return [s for _, s in sorted(events)][:length]


def oracle_draws(sizes: Sequence[int], sources: Sequence[int], seed: int, epoch: int,
                 shuffle: bool = True) -> list[tuple[int, int]]:
    """(source, sample) of each place: a source's j-th draw is its cycle's permutation at j mod N_s."""
    drawn = [0] * len(sizes)
    out = []
    for s in sources:
        j = drawn[s]
        drawn[s] += 1
        if shuffle:
            perm = np.random.default_rng([seed, epoch, s, j // sizes[s]]).permutation(sizes[s])
            out.append((s, int(perm[j % sizes[s]])))
        else:
            out.append((s, j % sizes[s]))
    return out


def oracle_rank_batches(sizes: Sequence[int], phases: Sequence[tuple[int, Sequence[float]]], seed: int, epoch: int,
                        world_size: int, rank: int, batch_size: int, drop_last: bool = False,
                        shuffle: bool = True) -> list[list[tuple[int, int]]]:
    """Rank `rank`'s batches of (source, sample) in `epoch`: the epoch's places (as many as the
    sources' samples) dealt as DistributedSampler deals an unshuffled dataset of that length."""
    length = sum(sizes)
    sampler = DistributedSampler(range(length), num_replicas=world_size, rank=rank, shuffle=False,
                                 drop_last=drop_last)
    batches_per_rank = len(list(torch.utils.data.BatchSampler(range(len(sampler)), batch_size, drop_last)))
    places = oracle_draws(sizes, oracle_sources(sizes, phases, length, seed, epoch, world_size * batch_size,
                                                epoch * batches_per_rank * world_size * batch_size),
                          seed, epoch, shuffle)
    mine = [places[p] for p in sampler]
    batches = [mine[i:i + batch_size] for i in range(0, len(mine), batch_size)]
    return batches[:batches_per_rank]
