"""What the resume check says changed between two reproducibility manifests."""

from __future__ import annotations

import copy
from typing import Any

from shardstream.client.manifest_diff import notes, refusals


def manifest(files: int = 3) -> dict[str, Any]:
    return {
        "dataset": {"entries": ["gs://b/d"], "format": "parquet", "format_args": {}, "fingerprint": "f1",
                    "shard_count": files,
                    "shards": [{"url": f"gs://b/d/{i}.parquet", "size": 10, "version": "generation=1", "samples": 5}
                               for i in range(files)]},
        "pipeline": {"transform": "m:t", "transform_args": {"size": 224}, "columns": [], "collate": "",
                     "code": {"m:t": {"module": "m", "sha256": "aaa"}}, "hash": "h1"},
        "order": {"world_size": 8, "batch_size": 32, "seed": 0, "shuffle": True},
        "service": {"torch": "2.13.0", "pyarrow": "20.0.0"},
    }


def test_nothing_changed_and_an_elastic_resume_are_not_refused() -> None:
    saved, now = manifest(), manifest()
    now["order"].update(world_size=16, batch_size=16)
    assert refusals(saved, now) == [] and notes(saved, now) == []


def test_changed_added_and_removed_files_are_named() -> None:
    saved, now = manifest(8), manifest(8)
    now["dataset"]["fingerprint"] = "f2"
    now["dataset"]["shards"][1]["version"] = "generation=2"
    now["dataset"]["shards"] = [s for s in now["dataset"]["shards"] if not s["url"].endswith("/7.parquet")]
    now["dataset"]["shards"] += [{"url": f"gs://b/d/new{i}.parquet", "size": 1, "version": "", "samples": 1}
                                 for i in range(7)]
    said = refusals(saved, now)
    assert said[0] == ("1 file(s) changed: gs://b/d/1.parquet (size 10 -> 10, version 'generation=1' -> "
                       "'generation=2')")
    assert said[1].startswith("7 file(s) added: gs://b/d/new0.parquet") and said[1].endswith("and 2 more")
    assert said[2] == "1 file(s) removed: gs://b/d/7.parquet"


def test_a_changed_fingerprint_beyond_the_listed_shards_is_still_refused() -> None:
    saved, now = manifest(), manifest()
    now["dataset"]["fingerprint"] = "f2"
    assert refusals(saved, now) == ["dataset fingerprint f1 -> f2 (3 -> 3 shards)"]


def test_pipeline_and_code_changes_are_named_and_package_upgrades_noted() -> None:
    saved = manifest()
    now = copy.deepcopy(saved)
    now["pipeline"].update(hash="h2", transform_args={"size": 256})
    now["pipeline"]["code"]["m:t"]["sha256"] = "bbb"
    now["order"]["seed"] = 1
    now["service"]["torch"] = "2.14.0"
    assert refusals(saved, now) == ["order seed: 0 -> 1", "pipeline transform_args: {'size': 224} -> {'size': 256}",
                                    "the code of 'm:t' changed (sha256 aaa -> sha256 bbb)"]
    assert notes(saved, now) == ["torch 2.13.0 -> 2.14.0"]


def test_a_transforms_file_added_removed_or_changed_is_named() -> None:
    saved = manifest()
    saved["pipeline"]["files"] = {"tokenizer": {"url": "gs://b/tok.json", "sha256": "a" * 64}}
    now = copy.deepcopy(saved)
    now["pipeline"].update(hash="h2")
    now["pipeline"]["files"]["tokenizer"]["sha256"] = "b" * 64
    assert refusals(saved, now) == [f"the transform's tokenizer file changed ('gs://b/tok.json' sha256 {'a' * 16} "
                                    f"-> 'gs://b/tok.json' sha256 {'b' * 16})"]
    del now["pipeline"]["files"]
    assert refusals(saved, now) == [f"the transform's tokenizer file changed ('gs://b/tok.json' sha256 {'a' * 16} "
                                    "-> none)"]
