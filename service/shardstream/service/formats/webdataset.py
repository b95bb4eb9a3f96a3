"""WebDataset tar shards: a sample is the run of members sharing a key, fields named by extension.

As WebDataset names them: ``train/000123.jpg`` and ``train/000123.cls`` are
the fields ``jpg`` and ``cls`` of sample ``train/000123``. Sample order is the
shards in sorted path order, samples in file order. Fields become columns:
``cls``, ``index``, ``id`` and the like hold integers (int64), ``txt`` and
``json`` text (strings), every other extension bytes (an image for
``transform="image"`` with ``transform_args={"column": "jpg"}``).

Random access comes from an index of member offsets, built when a job opens
by reading the tar headers (once per file version, then kept by the service),
never by scanning the tar per sample. A unit is a run of consecutive samples
read as one byte range; a truncated or corrupt tar is refused at open, naming
the file and the byte where it breaks.
"""

from __future__ import annotations

import logging
import re
import tarfile
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import fsspec
import numpy as np
import pyarrow as pa

from shardstream.proto.errors import UnreadableShard
from shardstream.service.dataset import (
    DatasetIndex,
    Shard,
    check_columns,
    in_parallel,
    resolve_urls,
    stat_file,
)
from shardstream.service.formats.base import Allow, UnitStorage, take_args

log = logging.getLogger(__name__)

SUFFIXES = (".tar",)
INTEGER_FIELDS = ("cls", "cls2", "class", "count", "index", "inx", "id")  # WebDataset's int decoders
TEXT_FIELDS = ("txt", "text", "transcript", "json", "jsn")
UNIT_BYTES = 8 * 2**20  # a unit is at most this many bytes of members (or one sample)...
UNIT_SAMPLES = 256  # ...and at most this many samples
SCANS_KEPT = 4096  # tar member tables the service keeps, by file version
_KEY = re.compile(r"^((?:.*/|)[^./]+)\.([^/]*)$")  # WebDataset's base_plus_ext: key up to the first dot


@dataclass(frozen=True)
class TarMembers:
    """One tar's samples: member j of sample i is members[starts[i] + j]."""

    keys: tuple[str, ...]
    starts: np.ndarray  # [samples + 1] into the member arrays
    fields: tuple[str, ...]  # each member's extension
    offsets: np.ndarray  # [members] where its data starts in the file
    sizes: np.ndarray  # [members]


@dataclass(frozen=True)
class TarLayout:
    url: str
    members: TarMembers
    unit_starts: tuple[int, ...]  # each unit's first sample

    def sample_name(self, row: int) -> str:
        return f"sample {self.members.keys[row]!r} of {self.url}"


def _field_type(field: str) -> pa.DataType:
    name = field.lower()
    if name in INTEGER_FIELDS:
        return pa.int64()
    if name in TEXT_FIELDS:
        return pa.string()
    return pa.binary()


def scan_tar(url: str, size: int) -> TarMembers:
    """Read a tar's headers: its samples and where each member's data lies."""
    fs, path = fsspec.core.url_to_fs(url)
    keys: list[str] = []
    starts: list[int] = []
    fields: list[str] = []
    offsets: list[int] = []
    sizes: list[int] = []
    with fs.open(path, "rb", block_size=2**20) as f:
        try:
            with tarfile.open(fileobj=f, mode="r:") as tar:
                for member in tar:
                    match = _KEY.match(member.name)
                    if not member.isfile() or match is None or member.name.rsplit("/", 1)[-1].startswith("."):
                        continue
                    key, field = match.groups()
                    if not keys or keys[-1] != key:
                        keys.append(key)
                        starts.append(len(fields))
                    elif field in fields[starts[-1]:]:
                        raise UnreadableShard(f"{url!r} has field {field!r} twice in sample {key!r} "
                                              f"(member {member.name!r} at byte {member.offset})")
                    if member.offset_data + member.size > size:
                        raise UnreadableShard(
                            f"{url!r} is truncated: member {member.name!r} needs bytes up to "
                            f"{member.offset_data + member.size} but the file has {size}")
                    fields.append(field)
                    offsets.append(member.offset_data)
                    sizes.append(member.size)
                stop = tar.offset
        except tarfile.TarError as exc:
            if "unexpected end of data" in str(exc):  # a member's data runs past the end
                raise UnreadableShard(f"{url!r} is truncated: it ends at byte {size}, inside the data of the "
                                      f"member after sample {keys[-1] if keys else '(none)'!r}") from None
            raise UnreadableShard(f"{url!r} is not a readable tar file: {exc}") from None
        f.seek(stop)
        rest = f.read(tarfile.BLOCKSIZE)
    if rest.strip(b"\0"):  # tarfile stops quietly at a bad header; a good tar ends in zero blocks
        if stop + tarfile.BLOCKSIZE > size:
            raise UnreadableShard(f"{url!r} is truncated: it ends at byte {size}, inside the tar header at "
                                  f"byte {stop} (after {len(keys)} sample(s))")
        raise UnreadableShard(f"{url!r} is corrupt: no valid tar header at byte {stop} (after {len(keys)} "
                              "sample(s))")
    return TarMembers(tuple(keys), np.array([*starts, len(fields)], dtype=np.int64), tuple(fields),
                      np.array(offsets, dtype=np.int64), np.array(sizes, dtype=np.int64))


class _Scans:
    """Member tables by file version: a tar is scanned once however many jobs open it."""

    def __init__(self, kept: int) -> None:
        self.kept = kept
        self._tables: OrderedDict[tuple[str, int, str], TarMembers] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, url: str, size: int, version: str) -> TarMembers:
        key = (url, size, version)
        with self._lock:
            found = self._tables.get(key)
            if found is not None:
                self._tables.move_to_end(key)
                return found
        members = scan_tar(url, size)
        with self._lock:
            self._tables[key] = members
            while len(self._tables) > self.kept:
                self._tables.popitem(last=False)
        return members


SCANS = _Scans(SCANS_KEPT)


def _units(members: TarMembers) -> tuple[int, ...]:
    """Each unit's first sample: consecutive samples up to UNIT_BYTES or UNIT_SAMPLES."""
    firsts: list[int] = []
    unit_start_byte = 0
    for sample in range(len(members.keys)):
        a, b = members.starts[sample], members.starts[sample + 1]
        end = int(members.offsets[b - 1] + members.sizes[b - 1]) if b > a else 0
        if (not firsts or sample - firsts[-1] >= UNIT_SAMPLES
                or end - unit_start_byte > UNIT_BYTES):
            firsts.append(sample)
            unit_start_byte = int(members.offsets[a]) if b > a else 0
    return tuple(firsts)


def _shard(url: str) -> tuple[Shard, TarMembers]:
    _, _, size, version = stat_file(url, "shard")
    try:
        members = SCANS.get(url, size, version)
    except UnreadableShard:
        raise
    except OSError as exc:  # the store, mid-scan
        raise UnreadableShard(f"{url!r} cannot be read: {exc}") from None
    firsts = _units(members)
    samples = len(members.keys)
    rows = tuple(b - a for a, b in zip(firsts, [*firsts[1:], samples], strict=True))
    shard = Shard(url=url, size=size, num_rows=samples, row_group_rows=rows, version=version,
                  format="webdataset", reading=f"webdataset unit={UNIT_BYTES}/{UNIT_SAMPLES}",
                  layout=TarLayout(url, members, firsts))
    return shard, members


class WebDatasetFormat:
    name = "webdataset"

    def index(self, dataset: tuple[str, ...], args: dict[str, Any], columns: tuple[str, ...],
              allow: Allow) -> DatasetIndex:
        take_args(self.name, args, {})
        urls = resolve_urls(dataset, allow, SUFFIXES, "WebDataset tar")
        log.info("indexing %d tar shard(s) of %s", len(urls), list(dataset))
        found = in_parallel(_shard, urls, "shards")
        fields = sorted({field for _, members in found for field in members.fields})
        schema = pa.schema([(field, _field_type(field)) for field in fields])
        schema = check_columns(schema, columns, f"the tar shards of {list(dataset)} (fields by extension)")
        return DatasetIndex(shards=tuple(shard for shard, _ in found), schema=schema, format=self.name)

    def read_unit(self, shard: Shard, unit: int, columns: tuple[str, ...] | None,
                  storage: UnitStorage) -> pa.Table:
        layout: TarLayout = shard.layout
        m = layout.members
        first = layout.unit_starts[unit]
        last = first + shard.row_group_rows[unit]
        a, b = int(m.starts[first]), int(m.starts[last])
        begin, end = int(m.offsets[a]), int(m.offsets[b - 1] + m.sizes[b - 1])
        data = storage.read_range(shard.url, shard.version, begin, end)
        names = columns if columns is not None else tuple(sorted(set(m.fields)))
        values: dict[str, list[Any]] = {name: [None] * (last - first) for name in names}
        for row in range(first, last):
            for j in range(int(m.starts[row]), int(m.starts[row + 1])):
                field = m.fields[j]
                if field in values:
                    at = int(m.offsets[j]) - begin
                    values[field][row - first] = _value(field, data[at: at + int(m.sizes[j])], layout, row)
        return pa.table({name: pa.array(values[name], type=_field_type(name)) for name in names})


def _value(field: str, data: bytes, layout: TarLayout, row: int) -> Any:
    kind = _field_type(field)
    if kind == pa.binary():
        return data
    try:
        text = data.decode("utf-8")
        return int(text.strip()) if kind == pa.int64() else text
    except ValueError:
        raise UnreadableShard(f"field {field!r} of {layout.sample_name(row)} holds {data[:40]!r}, "
                              f"not {'an integer' if kind == pa.int64() else 'UTF-8 text'}") from None


__all__ = ["SUFFIXES", "WebDatasetFormat", "scan_tar"]
