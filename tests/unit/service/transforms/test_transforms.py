"""build_transform: built-ins, the user-transform allowlist, and argument errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from shardstream.proto.errors import InvalidJobSpec, TransformNotAllowed, UnknownTransform
from shardstream.service.transforms import build_transform
from shardstream.service.transforms.image import ImageTransform

HERE = __name__  # "tests.unit.service.transforms.test_transforms": importable, so it serves as a user module


class Scale:
    def __init__(self, factor: int = 2) -> None:
        self.factor = factor

    def augment(self, sample: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
        return {k: v * self.factor for k, v in sample.items()}


def scale(factor: int = 2) -> Scale:
    return Scale(factor)


def nothing() -> object:
    return object()


NOT_CALLABLE = 3


def test_empty_name_means_no_transform() -> None:
    assert build_transform("", {}, ()) is None


def test_builtin_image() -> None:
    transform = build_transform("image", {"size": 8}, ())
    assert isinstance(transform, ImageTransform)
    assert (transform.height, transform.width) == (8, 8)


@pytest.mark.parametrize("name", ["imag", "nope", "module.without.factory", ":f", "mod:"])
def test_unknown_names(name: str) -> None:
    with pytest.raises(UnknownTransform, match="unknown transform"):
        build_transform(name, {}, (HERE,))


def test_user_transform_from_an_allowed_module() -> None:
    transform = build_transform(f"{HERE}:scale", {"factor": 3}, ("tests.unit",))
    assert isinstance(transform, Scale)
    assert transform.factor == 3


@pytest.mark.parametrize("allowed", [(), ("tests.other",), ("tests.uni",),
                                     ("tests.unit.service.transforms.test",)])
def test_module_outside_the_allowlist_is_refused(allowed: tuple[str, ...]) -> None:
    with pytest.raises(TransformNotAllowed, match=HERE):
        build_transform(f"{HERE}:scale", {}, allowed)


@pytest.mark.parametrize("allowed", [(HERE,), ("tests",), ("tests.",), ("other", "tests.unit")])
def test_allowlist_matches_whole_module_prefixes(allowed: tuple[str, ...]) -> None:
    assert build_transform(f"{HERE}:scale", {}, allowed) is not None


def test_allowed_but_not_installed_module() -> None:
    with pytest.raises(UnknownTransform, match="not installed"):
        build_transform("tests.unit.no_such_module_xyz:f", {}, ("tests",))


@pytest.mark.parametrize("attr", ["missing", "NOT_CALLABLE"])
def test_module_without_a_callable_factory(attr: str) -> None:
    with pytest.raises(UnknownTransform, match=attr):
        build_transform(f"{HERE}:{attr}", {}, ("tests",))


def test_factory_returning_something_that_is_not_a_transform() -> None:
    with pytest.raises(UnknownTransform, match="neither prepare"):
        build_transform(f"{HERE}:nothing", {}, ("tests",))


@pytest.mark.parametrize(("name", "kwargs"), [
    ("image", {"bogus": 1}),
    ("image", {"size": 0}),
    ("image", {"mode": "zoom"}),
    ("image", {"channels": 2}),
    ("image", {"resize_short": -1}),
    (f"{HERE}:scale", {"factor": 1, "extra": 2}),
])
def test_bad_kwargs_are_invalid_job_spec(name: str, kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidJobSpec):
        build_transform(name, kwargs, ("tests",))


def test_size_of_the_wrong_length_is_invalid_job_spec() -> None:
    with pytest.raises(InvalidJobSpec, match="size"):
        build_transform("image", {"size": [224]}, ())  # [1, 2, 3] fails the same way
