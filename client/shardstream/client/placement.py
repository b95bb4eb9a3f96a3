"""Which decode host a step goes to by preference: the same one every epoch, and for every job
that cuts the dataset into the same batches.

A decode node keeps what it has read and prepared: its local copy of row groups and its
prepared-sample cache. When a step holds the same samples every epoch (``shuffle=False``:
validation and evaluation loaders, or a sweep's jobs of one shape), the node that made it
the epoch before holds its samples. Least-loaded scheduling alone sends a step to whichever
decoder is free, so with n decode nodes each finds about 1/n of its batches' samples. The
scheduler (scheduler.py) prefers a step's home host while that host's decoders are not
busier than the least busy one by more than a little: where the home is slow, the step
goes elsewhere, so the preference never costs a stall, and which decoder makes a batch
never changes its bytes.

The home is picked by rendezvous hashing of (the step's identity, host) over the hosts the
rank knows: every rank and every epoch picks the same host, and a host that joins or leaves
moves only the steps it wins or held. With shuffle on, a step's samples change every epoch
and lie on every node whatever host it goes to; the preference then just spreads steps
evenly (docs/prepared-cache.md says what would serve shuffled batches from other nodes).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable


def _score(key: str, host: str) -> int:
    return int.from_bytes(hashlib.blake2b(f"{key}\0{host}".encode(), digest_size=8).digest(), "big")


class StepPlacement:
    """`identity` names the batches a step number stands for (world size, batch size, rank):
    two loaders that share it ask for the same samples at the same step when unshuffled.
    `host_of` gives a decoder's host from its address."""

    def __init__(self, identity: str, host_of: Callable[[str], str]) -> None:
        self.identity = identity
        self.host_of = host_of

    def home(self, step: int, hosts: Iterable[str]) -> str | None:
        """The host `step` prefers among `hosts` (None when there is none)."""
        key = f"{self.identity}/{step}"
        return max(hosts, key=lambda host: _score(key, host), default=None)


__all__ = ["StepPlacement"]
