"""A Mixture as the loader declares it and the service reads it: refusals by name, what changed
between two, and the per-source counts of a batch."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
import torch

from shardstream.proto.errors import InvalidJobSpec
from shardstream.proto.job_options import JobOptions
from shardstream.proto.mixture import (
    MAX_SOURCES,
    Mixture,
    Source,
    check_mixture,
    mixture_changes,
    read_mixture,
    served_by_source,
)


def option(**schedule: Any) -> dict[str, Any]:
    return Mixture([Source("web", "/w", weight=3), Source("code", ["/c1", "/c2"], format="jsonl", weight=1)],
                   schedule={int(k[1:]): v for k, v in schedule.items()}).as_option()


def test_a_mixture_becomes_sources_and_phases_the_service_reads_back() -> None:
    spec = read_mixture(option(s100={"code": 2.0}))
    assert spec.names == ("web", "code") and spec.datasets == (("/w",), ("/c1", "/c2"))
    assert spec.formats == ("", "jsonl")
    assert spec.phases == ((0, (3.0, 1.0)), (100, (0.0, 2.0)))  # a source a phase leaves out weighs 0 in it


def test_a_schedule_at_step_0_replaces_the_weights() -> None:
    assert read_mixture(option(s0={"web": 1, "code": 1})).phases == ((0, (1.0, 1.0)),)


def test_a_loader_keyword_or_the_dataset_takes_a_mixture() -> None:
    mix = Mixture([Source("a", "/a")])
    by_dataset = JobOptions.given(dataset=mix, batch_size=2)
    by_keyword = JobOptions.given(dataset=None, mixture=mix, batch_size=2)
    assert by_dataset == by_keyword and by_dataset.dataset == () and by_dataset.mixture == mix.as_option()
    assert JobOptions.from_proto(by_dataset.to_proto()) == by_dataset


def sources(n: int) -> list[dict[str, Any]]:
    return [{"name": f"s{i}", "dataset": [f"/{i}"], "format": "", "format_args": {}} for i in range(n)]


@pytest.mark.parametrize(("value", "needle"), [
    ({"sources": sources(1)}, "needs its weights"),
    ({"sources": sources(1), "phases": [[0, [1]]], "extra": 1}, "object of 'sources' and 'phases'"),
    ({"sources": sources(MAX_SOURCES + 1), "phases": [[0, [1] * (MAX_SOURCES + 1)]]}, "at most 256 sources"),
    ({"sources": [{"name": "", "dataset": ["/a"]}], "phases": [[0, [1]]]}, "needs a name"),
    ({"sources": [{"name": "a", "dataset": []}], "phases": [[0, [1]]]}, "non-empty list of URLs"),
    ({"sources": [{"name": "a", "dataset": "/a"}], "phases": [[0, [1]]]}, "non-empty list of URLs"),
    ({"sources": [{"name": "a", "dataset": ["/a"], "url": 1}], "phases": [[0, [1]]]}, "must be an object of"),
    ({"sources": sources(2), "phases": [[0, [1]]]}, "gives 1 weights for 2 sources"),
    ({"sources": sources(2), "phases": [[0, [1, float("nan")]]]}, "finite numbers >= 0"),
    ({"sources": sources(2), "phases": [[0, [1, -1]]]}, "finite numbers >= 0"),
    ({"sources": sources(2), "phases": [[0, [1, True]]]}, "finite numbers >= 0"),
    ({"sources": sources(2), "phases": [[0, [0, 0]]]}, "all 0"),
    ({"sources": sources(1), "phases": [[5, [1]]]}, "those of step 0"),
    ({"sources": sources(1), "phases": [[0, [1]], [9, [2]], [9, [3]]]}, "must rise"),
    ({"sources": sources(1), "phases": [[0, [1]], [2**62, [2]]]}, "below 2\\*\\*62"),
    ({"sources": sources(1), "phases": [[0.5, [1]]]}, "is \\[step, \\[weights\\]\\]"),
])
def test_bad_mixtures_are_refused_naming_what_is_wrong(value: dict[str, Any], needle: str) -> None:
    refusal = check_mixture(value)
    assert refusal is not None
    assert re.search(needle, refusal), refusal
    with pytest.raises(InvalidJobSpec, match=needle):
        JobOptions(mixture=value, batch_size=1)


def test_a_schedule_naming_a_source_the_mixture_lacks_is_refused() -> None:
    with pytest.raises(InvalidJobSpec, match=r"weighs source\(s\) \['docs'\]"):
        Mixture([Source("web", "/w")], schedule={10: {"docs": 1.0}}).as_option()


def test_changes_name_each_source_and_weight_that_differs() -> None:
    before = option(s100={"code": 2.0})
    assert mixture_changes(before, before) == []
    changed = Mixture([Source("web", "/w2", weight=3), Source("docs", "/d", weight=1)],
                      schedule={100: {"docs": 2.0}}).as_option()
    assert mixture_changes(before, changed) == [
        "mixture source 'code' removed", "mixture source 'docs' added", 'mixture source \'web\' dataset: ["/w"] -> ["/w2"]',
        "mixture weight of 'code' at step 0: 1.0 -> None", "mixture weight of 'docs' at step 0: None -> 1.0",
        "mixture weight of 'code' at step 100: 2.0 -> None", "mixture weight of 'docs' at step 100: None -> 2.0"]
    assert mixture_changes(before, option(s50={"web": 1.0})) == [
        "mixture schedule step 50: none -> {\"code\": 0.0, \"web\": 1.0}",
        'mixture schedule step 100: {"code": 2.0, "web": 0.0} -> none']
    assert mixture_changes(None, before)[0].startswith("mixture: none -> ")


def test_a_batch_is_counted_by_source_with_its_tokens_without_padding() -> None:
    starts = np.array([0, 10, 15, 30])
    indices = [3, 12, 29, 0, 14]
    padded = {"input_ids": torch.zeros(5, 9), "input_ids_lengths": torch.tensor([1, 2, 3, 4, 5])}
    assert served_by_source(starts, indices, padded) == ([2, 2, 1], [5, 7, 3])
    windows = {"input_ids": np.zeros((5, 16))}
    assert served_by_source(starts, indices, windows) == ([2, 2, 1], [32, 32, 16])
    assert served_by_source(starts, indices, {"image": np.zeros((5, 3))}) == ([2, 2, 1], [0, 0, 0])
