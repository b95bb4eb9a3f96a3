"""What a RemoteLoader has delivered, and how long the training loop waited for it."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from shardstream.client.tensors import Batch, batch_nbytes
from shardstream.proto.mixture import served_by_source


@dataclass
class LoaderStats:
    """Running totals over every epoch of one loader (`loader.stats`).

    wait_seconds is the time the training loop spent blocked in ``next()`` on the
    loader: opening streams, reconnecting and waiting for batches that had not
    arrived yet. Divided by the wall time of an epoch it is the data stall: the
    share of the step time a GPU would sit idle waiting for input. Take deltas
    between two reads to measure one epoch.
    """

    batches: int = 0
    samples: int = 0
    bytes: int = 0
    wait_seconds: float = 0.0
    decoders_lost: int = 0  # direct data plane: decoder streams that failed under this loader
    steps_refetched: int = 0  # ... and the steps then asked of other decoders
    decoders_drained: int = 0  # decoders the service gave back (drained) under this loader: not failures
    shared_batches: int = 0  # batches a decoder on this host wrote into shared memory (not sent)
    bulk_batches: int = 0  # batches a decoder on another host sent on a bulk socket (not on gRPC)
    steps_at_home: int = 0  # steps asked of a decoder on their home host (placement.py), of `batches`
    # Batches larger than the room left in the window when asked for, asked for again once there
    # was room (variable-size batches; one larger than the whole window is an error).
    steps_waited_for_room: int = 0
    # The largest batch received: the next epoch's window counts a step in flight at this size
    # from its start, so it asks every decoder at once instead of one step until a batch arrives.
    largest_batch_bytes: int = 0
    # A mixture's samples and tokens (input_ids, without padding) delivered, by source name
    source_samples: dict[str, int] = field(default_factory=dict)
    source_tokens: dict[str, int] = field(default_factory=dict)

    def source_shares(self) -> dict[str, float]:
        """Each source's share of the samples delivered, to set beside the weights asked for."""
        total = sum(self.source_samples.values())
        return {name: count / total for name, count in self.source_samples.items()} if total else {}

    def add_sources(self, names: tuple[str, ...], starts: tuple[int, ...], indices: tuple[int, ...],
                    tensors: Batch) -> None:
        samples, tokens = served_by_source(np.asarray(starts, dtype=np.int64), indices, tensors)
        for name, n, t in zip(names, samples, tokens, strict=True):
            self.source_samples[name] = self.source_samples.get(name, 0) + n
            self.source_tokens[name] = self.source_tokens.get(name, 0) + t

    def add_batch(self, tensors: Batch) -> None:
        self.batches += 1
        first = next(iter(tensors.values()), None)
        if isinstance(first, list):  # strings
            self.samples += len(first)
        else:
            self.samples += int(first.shape[0]) if first is not None and first.dim() else 0
        self.bytes += batch_nbytes(tensors)


__all__ = ["LoaderStats"]
