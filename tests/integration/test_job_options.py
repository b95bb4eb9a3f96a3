"""A job option end to end, from the loader's keyword through the service to the decode actors:
augment_seed, declared once (shardstream.proto.job_options)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from shardstream.client import OrderOptions, RemoteLoader
from tests.datasets import write_images


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> str:
    directory = str(tmp_path_factory.mktemp("augment-seed"))
    write_images(directory, [10, 6])
    return directory


def epoch(address: str, dataset: str, name: str, **options: Any) -> tuple[list[int], dict[int, np.ndarray], dict]:
    """Epoch 1's sample order, each sample's image, and the job's manifest."""
    with RemoteLoader(address, dataset=dataset, batch_size=4, transform="image",
                      transform_args={"size": 16, "flip": True}, columns=["image", "idx"], world_size=1, rank=0,
                      job_name=name, **options) as loader:
        loader.set_epoch(1)
        order, pixels = [], {}
        for batch in loader:
            for i, image in zip(batch["idx"].tolist(), batch["image"].numpy(), strict=True):
                order.append(i)
                pixels[i] = image
        return order, pixels, loader.manifest()


def test_augment_seed_changes_the_augmentations_and_keeps_the_order(service_address: str, images: str) -> None:
    order, own, manifest = epoch(service_address, images, "augment-own", seed=3, order=OrderOptions(augment_seed=9))
    seed_3_order, seed_3, plain = epoch(service_address, images, "augment-3", seed=3)
    seed_9_order, seed_9, _ = epoch(service_address, images, "augment-9", seed=9)
    assert order == seed_3_order != seed_9_order  # the order is seed's
    assert all(np.array_equal(own[i], seed_9[i]) for i in own)  # the augmentations augment_seed's
    assert any(not np.array_equal(own[i], seed_3[i]) for i in own)
    assert manifest["pipeline"]["augment_seed"] == 9 and "augment_seed" not in plain["pipeline"]
