"""The conformance suite every dataset format passes, through a real service.

For each format (tests/formats.py): every rank's batches are DataLoader +
DistributedSampler's, epoch after epoch; a resumed loader continues exactly;
a broken dataset is refused with an error naming the file and the cause while
the service keeps serving; and the same dataset on gs:// (a real GCS API
server) reads in the same order.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator

import pytest

import shardstream.client as client
from shardstream.client import RemoteLoader
from tests.datasets import oracle_batches
from tests.formats import CASES, FormatCase
from tests.gcs_emulator import GcsEmulator, running_gcs_emulator
from tests.stateful import END, check_resumes, loader_passes

BUCKET = "shardstream-formats"


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, int]]:
    """Each case's dataset: its directory and sample count."""
    written = {}
    for case in CASES:
        directory = str(tmp_path_factory.mktemp(case.name))
        written[case.name] = (directory, case.write(directory))
    return written


@pytest.fixture(scope="module", autouse=True)
def gcs(datasets: dict[str, tuple[str, int]]) -> Iterator[GcsEmulator]:
    """Every case's dataset, uploaded under gs://BUCKET/<case>/ (before the module's Ray job
    starts, so the decoders see the emulator)."""
    with running_gcs_emulator() as emulator:
        emulator.create_bucket(BUCKET)
        for name, (directory, _) in datasets.items():
            for path in sorted(glob.glob(f"{directory}/**/*", recursive=True)):
                if os.path.isfile(path):
                    emulator.upload(path, f"gs://{BUCKET}/{name}/{os.path.relpath(path, directory)}")
        yield emulator


def keys(case: FormatCase, loader: RemoteLoader) -> list[list[int]]:
    return [case.key(batch) for batch in loader]


def open_loader(address: str, case: FormatCase, dataset: str, **kwargs: object) -> RemoteLoader:
    options = {"batch_size": 4, "shuffle": True, "seed": 3, **case.options, **kwargs}
    return RemoteLoader(address, dataset=dataset, **options)  # type: ignore[arg-type]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_every_rank_gets_distributed_samplers_batches(service_address: str, case: FormatCase,
                                                      datasets: dict[str, tuple[str, int]]) -> None:
    directory, n = datasets[case.name]
    for rank in (0, 1):
        with open_loader(service_address, case, directory, world_size=2, rank=rank) as loader:
            assert loader.num_samples == n
            for epoch in (0, 1):
                loader.set_epoch(epoch)
                assert keys(case, loader) == oracle_batches(n, 2, rank, 4, True, 3, False, epoch)


@pytest.mark.parametrize("case", CASES, ids=str)
def test_a_resumed_loader_continues_exactly(service_address: str, case: FormatCase,
                                            datasets: dict[str, tuple[str, int]]) -> None:
    """From a fresh loader, 2 batches in, at the end of epoch 4 and 1 batch into epoch 5
    (tests/stateful.py); and with the training loop's set_epoch(4) after loading."""
    directory, n = datasets[case.name]

    def started_at_epoch_4() -> RemoteLoader:
        it = open_loader(service_address, case, directory, world_size=2, rank=1, job_name=f"resume-{case}")
        it.set_epoch(4)
        return it

    epochs = {epoch: oracle_batches(n, 2, 1, 4, True, 3, False, epoch) for epoch in (4, 5)}
    expected = [item for epoch, batches in epochs.items() for item in [*((epoch, b) for b in batches), (END, epoch)]]
    resumes = check_resumes(started_at_epoch_4, lambda it: loader_passes(it, case.key), len(expected),
                            points=[0, 2, len(epochs[4]) + 1, len(epochs[4]) + 2], expected=expected)
    with open_loader(service_address, case, directory, world_size=2, rank=1, job_name=f"resume-{case}") as again:
        again.load_state_dict(resumes.states[2])
        again.set_epoch(4)
        after = keys(case, again)
    before = [batch for _, batch in resumes.reference[:2]]
    assert before + after == epochs[4]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_a_broken_dataset_is_refused_by_name_and_the_service_keeps_serving(
        service_address: str, case: FormatCase, datasets: dict[str, tuple[str, int]],
        tmp_path: object) -> None:
    broken = str(tmp_path)
    pattern = case.break_it(broken)
    with pytest.raises(getattr(client, case.error), match=pattern):
        with open_loader(service_address, case, broken, world_size=1, rank=0, shuffle=False) as loader:
            list(loader)
    directory, n = datasets[case.name]
    with open_loader(service_address, case, directory, world_size=1, rank=0) as loader:
        assert keys(case, loader) == oracle_batches(n, 1, 0, 4, True, 3, False, 0)


@pytest.mark.parametrize("case", CASES, ids=str)
def test_the_same_dataset_on_gcs_reads_in_the_same_order(service_address: str, case: FormatCase,
                                                         datasets: dict[str, tuple[str, int]]) -> None:
    _, n = datasets[case.name]
    with open_loader(service_address, case, f"gs://{BUCKET}/{case.name}/", world_size=2, rank=0) as loader:
        loader.set_epoch(7)
        assert keys(case, loader) == oracle_batches(n, 2, 0, 4, True, 3, False, 7)
