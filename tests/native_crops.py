"""The native JPEG crop's work, counted per sample whichever way it is called (one sample, or a batch)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from shardstream.service.transforms import jpeg_crop
from shardstream.service.transforms.image import ImageTransform


def native_crops(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """From now on, one entry per sample the native crop writes: whether it also wrote the whole
    image (for the prepared-sample cache). Its check at load is made before."""
    assert jpeg_crop.available()
    crops: list[bool] = []
    one, batch = jpeg_crop.crop_into, jpeg_crop.crop_batch

    def crop_into(*args: Any) -> bool:
        done = one(*args)
        if done:
            crops.append(args[-1] is not None)
        return done

    def crop_batch(*args: Any) -> np.ndarray:
        done = batch(*args)
        wholes = args[-1]
        crops.extend(wholes[i] is not None for i in np.flatnonzero(done).tolist())
        return done

    monkeypatch.setattr(jpeg_crop, "crop_into", crop_into)
    monkeypatch.setattr(jpeg_crop, "crop_batch", crop_batch)
    return crops


def one_sample_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """decode_batch's loop for the image transform too: no batch made in one native call."""
    monkeypatch.setattr(ImageTransform, "batch_shape", lambda self: None)


__all__ = ["native_crops", "one_sample_at_a_time"]
