"""The epoch plan: which global sample indices each rank gets, batch by batch.

A pure function of (N, world size, batch size, shuffle, seed, drop_last,
epoch): it reproduces ``DistributedSampler`` + ``set_epoch`` + ``DataLoader``
bit for bit by calling torch's own ``randperm`` with the same generator seed.
Nothing here depends on timing, worker count or which actor decodes what.

The second order mode, block shuffle (``shuffle_block`` > 0, docs/order-modes.md),
replaces only the epoch's order: the row groups in a random order, then each
run of ``shuffle_block`` samples of that sequence shuffled among themselves
(MosaicML Streaming's "py1s" shape). It is not DistributedSampler's order, but
it is made the same way from (seed, epoch) alone, and ranks take every W-th
sample of it as in the exact mode, so equal batch counts, resume and elastic
resume (the same global batch size) hold unchanged. What it buys: the
samples of one step come from a window of about ``shuffle_block`` samples of
consecutive row groups, so the decoders read a dataset larger than their
cache as a stream rather than at random.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import torch

from shardstream.proto.errors import InvalidJobSpec
from shardstream.service.mixture_plan import mixture_sequence


@dataclass(frozen=True)
class SamplingSpec:
    num_samples_total: int  # N, rows in the dataset
    world_size: int
    batch_size: int
    shuffle: bool
    seed: int
    drop_last: bool
    shuffle_block: int = 0  # 0: DistributedSampler's exact order; > 0: block shuffle (above)
    unit_rows: tuple[int, ...] = ()  # block shuffle: rows of each row group, in global order
    # Weighted sampling: each sample's weight as little-endian float64 (weights.py); b"": none. Each
    # epoch's sequence is then N draws with replacement, as WeightedRandomSampler makes it.
    weights: bytes = b""
    # Length bucketing: each sample's length as little-endian int64 (control/per_sample.py); b"": none. A
    # rank's samples are grouped into batches of similar length, bucket_window batches at a time.
    lengths: bytes = b""
    bucket_window: int = 0
    # A mixture (mixture_plan.py): each source's samples, in global order, and the weight phases
    # (first global step, weights); () for one dataset. The epoch's sequence is the mixture's N draws.
    mixture_rows: tuple[int, ...] = ()
    mixture_phases: tuple[tuple[int, tuple[float, ...]], ...] = ()

    @property
    def in_order(self) -> bool:
        """The epoch's sequence is arange(N): nothing shuffles or draws it."""
        return not self.shuffle and not self.weights and not self.mixture_rows

    @property
    def samples_per_rank(self) -> int:
        """DistributedSampler.num_samples."""
        n, w = self.num_samples_total, self.world_size
        if self.drop_last and n % w:
            return math.ceil((n - w) / w)
        return math.ceil(n / w)

    @property
    def batches_per_rank(self) -> int:
        """len(DataLoader) on every rank."""
        if self.drop_last:
            return self.samples_per_rank // self.batch_size
        return math.ceil(self.samples_per_rank / self.batch_size)


@dataclass(frozen=True)
class EpochPlan:
    """One epoch's plan. DistributedSampler pads its order to `total` = samples_per_rank * W by
    wrapping from the head, and rank r takes positions r, r + W, r + 2W, ...; so position p of
    the padded order is `sequence[p % N]`, and a rank's batch is read off the N-long sequence
    without ever making the padded order: O(N) per epoch plus O(batch) per batch, whatever the
    world size (docs/architecture.md, "Limits")."""

    sampling: SamplingSpec
    epoch: int
    _bucketed: dict[int, np.ndarray] = field(default_factory=dict, compare=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, compare=False, repr=False)

    @cached_property
    def sequence(self) -> np.ndarray:
        """The epoch's order of the N samples before padding (the exact mode's randperm, the
        weighted draws, the block shuffle); int64. Unshuffled, it is never made (`_at`)."""
        s = self.sampling
        n = s.num_samples_total
        if s.mixture_rows:
            return self._mixture_sequence()
        if s.weights:
            generator = torch.Generator()
            generator.manual_seed(s.seed + self.epoch)
            weights = torch.from_numpy(np.frombuffer(s.weights, dtype="<f8").copy())
            return torch.multinomial(weights, n, replacement=True, generator=generator).numpy().astype(np.int64)
        if s.shuffle and s.shuffle_block:
            return block_shuffle(s.unit_rows, s.shuffle_block, s.seed + self.epoch)
        if s.shuffle:
            generator = torch.Generator()
            generator.manual_seed(s.seed + self.epoch)
            return torch.randperm(n, generator=generator).numpy().astype(np.int64)
        return np.arange(n, dtype=np.int64)

    def _mixture_sequence(self) -> np.ndarray:
        """The mixture's draws as global indices. Its schedule counts global steps (W x B places
        each) across epochs: this epoch's first is epoch x batches_per_rank."""
        s = self.sampling
        per_step = s.world_size * s.batch_size
        source, sample = mixture_sequence(s.mixture_rows, s.mixture_phases, s.num_samples_total, s.seed, self.epoch,
                                          places_per_step=per_step,
                                          first_place=self.epoch * s.batches_per_rank * per_step, shuffle=s.shuffle)
        starts = np.concatenate([[0], np.cumsum(s.mixture_rows)]).astype(np.int64)
        return starts[source] + sample

    @property
    def order(self) -> np.ndarray:
        """The whole padded global order, made on each call: O(samples_per_rank * W). For tests and
        benchmarks; serving reads batches off `sequence` instead."""
        s = self.sampling
        return self._at(np.arange(s.samples_per_rank * s.world_size, dtype=np.int64))

    def _at(self, positions: np.ndarray) -> np.ndarray:
        """The samples at these positions of the padded order (padding wraps from the head)."""
        n = self.sampling.num_samples_total
        if not len(positions):
            return np.empty(0, dtype=np.int64)
        wrapped = positions % n
        s = self.sampling
        if s.in_order:
            return wrapped  # the unshuffled sequence is arange(N)
        return self.sequence[wrapped]

    def _positions(self, rank: int, start: int, stop: int) -> np.ndarray:
        """Positions in the padded order of the rank's samples start..stop-1."""
        return rank + self.sampling.world_size * np.arange(start, stop, dtype=np.int64)

    def rank_indices(self, rank: int) -> np.ndarray:
        s = self.sampling
        if not s.lengths:
            return self._at(self._positions(rank, 0, s.samples_per_rank))
        with self._lock:
            bucketed = self._bucketed.get(rank)
        if bucketed is None:
            # drop_last drops the same samples; a rank's own slice only: O(samples_per_rank)
            delivered = self._at(self._positions(rank, 0, min(s.batches_per_rank * s.batch_size,
                                                              s.samples_per_rank)))
            bucketed = bucket_by_length(delivered, np.frombuffer(s.lengths, dtype="<i8"), s.batch_size,
                                        s.bucket_window, (s.seed, self.epoch, rank))
            with self._lock:
                self._bucketed[rank] = bucketed
        return bucketed

    def batch_indices(self, rank: int, step: int) -> np.ndarray:
        s = self.sampling
        b = s.batch_size
        if not 0 <= step < s.batches_per_rank:
            raise IndexError(f"step {step} is outside 0..{s.batches_per_rank - 1}")
        if s.lengths:
            return self.rank_indices(rank)[step * b : (step + 1) * b]
        return self._at(self._positions(rank, step * b, min((step + 1) * b, s.samples_per_rank)))


def bucket_by_length(indices: np.ndarray, lengths: np.ndarray, batch_size: int, window_batches: int,
                     seed: tuple[int, int, int]) -> np.ndarray:
    """`indices` (a rank's samples of an epoch) regrouped: each window of `window_batches` batches
    sorted by length (ties in their order), cut into batches, and those batches in an order drawn
    from `seed` (seed, epoch, rank). The same samples, only grouped otherwise."""
    window = window_batches * batch_size
    rng = np.random.default_rng([value % 2**63 for value in seed])
    out: list[np.ndarray] = []
    for start in range(0, len(indices), window):
        chunk = indices[start : start + window]
        chunk = chunk[np.argsort(lengths[chunk], kind="stable")]
        batches = [chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size)]
        full = [b for b in batches if len(b) == batch_size]  # a short last batch stays last
        order = rng.permutation(len(full))
        out.extend(full[i] for i in order)
        out.extend(b for b in batches if len(b) != batch_size)
    return np.concatenate(out) if out else indices[:0]


def block_shuffle(unit_rows: tuple[int, ...], block: int, seed: int) -> np.ndarray:
    """The row groups (of `unit_rows` rows each, in global order) in a random order, then each run
    of `block` samples of that sequence in a random order; torch's generator, as the exact mode."""
    rows = np.asarray(unit_rows, dtype=np.int64)
    n = int(rows.sum())
    generator = torch.Generator()
    generator.manual_seed(seed)
    units = torch.randperm(len(rows), generator=generator).numpy()
    lengths = rows[units]
    starts = np.cumsum(rows) - rows  # each row group's first global index
    # row j of the sequence is row (j - where its group begins in the sequence) of its group
    sequence = np.repeat(starts[units] - (np.cumsum(lengths) - lengths), lengths) + np.arange(n)
    keys = torch.randperm(n, generator=generator).numpy()  # distinct: the sort below has no ties
    return sequence[np.argsort((np.arange(n) // block) * n + keys)]


class PlanCache:
    """The most recent epochs' plans (an N-long sequence each, whatever the world size), by (owner, epoch)."""

    def __init__(self, kept: int) -> None:
        self.kept = kept
        self._plans: OrderedDict[tuple[Hashable, int], EpochPlan] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, sampling: SamplingSpec, epoch: int, owner: Hashable = None) -> EpochPlan:
        key = (owner, epoch)
        with self._lock:
            plan = self._plans.get(key)
            if plan is None:
                plan = self._plans[key] = EpochPlan(sampling, epoch)
                while len(self._plans) > self.kept:
                    self._plans.popitem(last=False)
            self._plans.move_to_end(key)
        return plan

    def forget(self, owner: Hashable) -> None:
        with self._lock:
            for key in [k for k in self._plans if k[0] == owner]:
                del self._plans[key]


# A rank's position, epoch * batches_per_rank + step + 1, is an int64 on the wire (GetStatus).
POSITION_BOUND = 2**62


def check_epoch_and_rank(sampling: SamplingSpec, epoch: int, rank: int) -> None:
    if epoch < 0:
        raise InvalidJobSpec(f"epoch must be >= 0, got {epoch}")
    if (epoch + 1) * max(sampling.batches_per_rank, 1) >= POSITION_BOUND:
        raise InvalidJobSpec(f"epoch {epoch} is past this job's last: epoch x batches per rank "
                             f"({sampling.batches_per_rank}) must stay below 2**62")
    if not 0 <= rank < sampling.world_size:
        raise InvalidJobSpec(f"rank {rank} is outside world_size {sampling.world_size}")


def check_step(sampling: SamplingSpec, epoch: int, rank: int, step: int) -> None:
    """Refuse, naming the bound, an (epoch, rank, step) outside the job."""
    check_epoch_and_rank(sampling, epoch, rank)
    if not 0 <= step < sampling.batches_per_rank:
        raise InvalidJobSpec(f"step {step} is outside 0..{sampling.batches_per_rank - 1}")


__all__ = ["EpochPlan", "PlanCache", "SamplingSpec", "block_shuffle", "bucket_by_length", "check_epoch_and_rank", "check_step"]
