"""Fixtures of the tests that start processes the way a user's shell would (`ray start`,
`shardstream serve`): each ended by its process group and environment marker, never `ray stop`."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.processes import Hosts, end_all, marked_pids


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[Hosts]:
    started = Hosts(tmp_path)
    yield started
    end_all(started.processes, started.marker)
    assert marked_pids(started.marker) == []


@pytest.fixture
def ray_temp_dir() -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="ss-ray-", dir="/tmp")  # Ray's socket paths must stay short
    yield path
    shutil.rmtree(path, ignore_errors=True)
