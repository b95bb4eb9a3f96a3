"""Bad input gets a typed error naming the cause; the service keeps serving others."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shardstream.client import (
    CorruptSample,
    DatasetNotFound,
    InvalidJobSpec,
    JobSpecConflict,
    RemoteLoader,
    SchemaMismatch,
    TransformNotAllowed,
    UnknownTransform,
    UnreadableShard,
)
from tests.datasets import oracle_batches, write_images, write_indexed


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> str:
    directory = str(tmp_path_factory.mktemp("good"))
    write_indexed(directory, [5, 6])
    return directory


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> str:
    directory = str(tmp_path_factory.mktemp("images"))
    write_images(directory, [10, 10], corrupt=[13])
    return directory


def assert_still_serves(address: str, good: str) -> None:
    with RemoteLoader(address, dataset=good, batch_size=4, world_size=1, rank=0, seed=1) as loader:
        assert [b["idx"].tolist() for b in loader] == oracle_batches(11, 1, 0, 4, True, 1, False, 0)


def open_loader(address: str, dataset: str, **kwargs: object) -> list[dict[str, object]]:
    options: dict = {"batch_size": 4, "world_size": 1, "rank": 0, **kwargs}
    with RemoteLoader(address, dataset=dataset, **options) as loader:
        return list(loader)


def test_missing_dataset(service_address: str, good: str, tmp_path: object) -> None:
    with pytest.raises(DatasetNotFound, match="does not exist"):
        open_loader(service_address, f"{tmp_path}/nope")
    assert_still_serves(service_address, good)


def test_empty_directory_and_unmatched_glob(service_address: str, tmp_path: object) -> None:
    with pytest.raises(DatasetNotFound, match="no Parquet files"):
        open_loader(service_address, str(tmp_path))
    with pytest.raises(DatasetNotFound, match="no files match"):
        open_loader(service_address, f"{tmp_path}/*.parquet")


def test_missing_shard_in_a_list(service_address: str, good: str) -> None:
    with pytest.raises(DatasetNotFound, match=r"missing\.parquet"):
        open_loader(service_address, [f"{good}/part-00000.parquet", f"{good}/missing.parquet"])


def test_unreadable_file(service_address: str, good: str, tmp_path: object) -> None:
    bad = os.path.join(str(tmp_path), "junk.parquet")
    with open(bad, "wb") as f:
        f.write(b"this is not parquet")
    with pytest.raises(UnreadableShard, match=r"junk\.parquet"):
        open_loader(service_address, bad)
    assert_still_serves(service_address, good)


def test_schemas_disagree(service_address: str, good: str, tmp_path: object) -> None:
    directory = str(tmp_path)
    write_indexed(directory, [3])
    pq.write_table(pa.table({"idx": pa.array([1.0]), "x": pa.array([1])}), f"{directory}/zz.parquet")
    with pytest.raises(SchemaMismatch, match=r"zz\.parquet"):
        open_loader(service_address, directory)
    assert_still_serves(service_address, good)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"batch_size": 0}, "batch_size must be > 0"),
    ({"batch_size": -3}, "batch_size must be > 0"),
    ({"rank": 2, "world_size": 2}, "rank 2 is outside world_size 2"),
    ({"columns": ["nope"]}, r"column\(s\) \['nope'\] not in shard"),
])
def test_invalid_spec(service_address: str, good: str, kwargs: dict, match: str) -> None:
    with pytest.raises(InvalidJobSpec, match=match):
        open_loader(service_address, good, **kwargs)


def test_binary_column_without_transform(service_address: str, images: str) -> None:
    with pytest.raises(InvalidJobSpec, match=r"'image'.*choose a transform"):
        open_loader(service_address, images)


def test_unknown_and_disallowed_transforms(service_address: str, good: str) -> None:
    with pytest.raises(UnknownTransform, match="unknown transform 'blur'"):
        open_loader(service_address, good, transform="blur")
    with pytest.raises(TransformNotAllowed, match="'os' is not allowed"):
        open_loader(service_address, good, transform="os:system", transform_args={"command": "true"})
    with pytest.raises(UnknownTransform, match="not installed"):
        open_loader(service_address, good, transform="tests.transforms.missing:make")
    assert_still_serves(service_address, good)


def test_allowed_user_transform(service_address: str, good: str) -> None:
    first = open_loader(service_address, good, transform="tests.transforms:scaled",
                        transform_args={"factor": 3.0}, shuffle=False)
    again = open_loader(service_address, good, transform="tests.transforms:scaled",
                        transform_args={"factor": 3.0}, shuffle=False)
    assert first[0]["x"][:, 0].tolist() == [3.0 * i for i in range(4)]
    assert [b["noise"].tolist() for b in first] == [b["noise"].tolist() for b in again]


def test_rank_with_a_different_spec_is_refused(service_address: str, good: str) -> None:
    with RemoteLoader(service_address, dataset=good, batch_size=4, world_size=2, rank=0,
                      job_name="conflict-job"):
        with pytest.raises(JobSpecConflict, match="batch_size: 5 != 4"):
            RemoteLoader(service_address, dataset=good, batch_size=5, world_size=2, rank=1,
                         job_name="conflict-job")


def test_corrupt_image_fails_naming_file_and_row(service_address: str, images: str, good: str) -> None:
    with pytest.raises(CorruptSample, match=r"sample 13 \(row 3 of .*img-00001.parquet\)"):
        open_loader(service_address, images, transform="image", transform_args={"size": 16},
                    columns=["image", "idx"], shuffle=False)
    assert_still_serves(service_address, good)


def test_corrupt_image_skipped_and_replaced_deterministically(service_address: str, images: str) -> None:
    options = {"transform": "image", "transform_args": {"size": 16}, "columns": ["image", "idx"],
               "shuffle": False, "on_corrupt": "skip"}
    with RemoteLoader(service_address, dataset=images, batch_size=4, world_size=1, rank=0,
                      **options) as loader:
        batches = list(loader)
        assert loader.samples_replaced == 1
    again = open_loader(service_address, images, **options)
    indices = [i for b in batches for i in b["idx"].tolist()]
    assert indices == [*range(13), 14, *range(14, 20)]  # 13 replaced by the next readable sample
    assert all(b["image"].shape[1:] == (3, 16, 16) for b in batches)
    assert all((a["image"] == b["image"]).all() for a, b in zip(batches, again, strict=True))
