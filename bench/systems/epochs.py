"""Several epochs of a loader as one iterable, the way a training loop runs them."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from bench.meter import Batch


def over_epochs(epoch_iterable: Callable[[int], Iterable[Batch]], epochs: int) -> Iterator[Batch]:
    """Batches of epochs 0..epochs-1; `epoch_iterable(e)` gives epoch e's batches."""
    for epoch in range(epochs):
        yield from epoch_iterable(epoch)


__all__ = ["over_epochs"]
