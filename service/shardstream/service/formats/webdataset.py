"""WebDataset tar shards: a sample is the run of members sharing a key, fields named by extension.

As the ``webdataset`` package (1.0.x) names and decodes them
(webdataset_names.py): ``train/000123.jpg`` and ``train/000123.CLS`` are the
fields ``jpg`` and ``cls`` of sample ``train/000123``. Sample order is the
shards in sorted path order, samples in file order. Fields become columns,
typed by their last part as WebDataset's default ``.decode()`` types them:
``cls``, ``label.cls``, ``index``, ``id`` hold integers (int64), ``txt``,
``en.txt`` and ``json`` text (strings; JSON checked to parse), every other
field bytes (an image for ``transform="image"`` with
``transform_args={"column": "jpg"}``); a ``.gz`` field is decompressed first.
The dataset's fields are the union of every sample's: a sample lacking one
holds null there, and a job that names the field in ``columns=`` is refused
at open, naming the samples that lack it.

Compressed tars (``.tar.gz``, ``.tgz``, or gzip/bzip2/xz/zstd bytes under any
name) are refused at open, naming the file: a unit is a byte range of the
tar, and a compressed stream has no byte ranges to read short of
decompressing it from the start for every unit.

Random access comes from an index of member offsets, built when a job opens
by reading the tar headers (once per file version, then kept by the service),
never by scanning the tar per sample. A unit is a run of consecutive samples
read as one byte range; a truncated or corrupt tar is refused at open, naming
the file and the byte where it breaks.
"""

from __future__ import annotations

import gzip
import json
import logging
import tarfile
import zlib
from dataclasses import dataclass
from typing import Any

import fsspec
import numpy as np
import pyarrow as pa

from shardstream.proto.errors import SchemaMismatch, UnreadableShard
from shardstream.service.dataset import (
    DatasetIndex,
    Shard,
    check_columns,
    in_parallel,
    resolve_urls,
    stat_file,
)
from shardstream.service.formats.base import Allow, UnitStorage, take_args
from shardstream.service.formats.kept_scans import KeptScans
from shardstream.service.formats.webdataset_names import (
    INTEGER_FIELDS,
    JSON_FIELDS,
    TEXT_FIELDS,
    decoded_by,
    field_type,
    gzipped,
    is_metadata,
    key_and_field,
)

log = logging.getLogger(__name__)

SUFFIXES = (".tar", ".tar.gz", ".tgz")  # compressed ones are listed to be refused by name
COMPRESSED_SUFFIXES = (".tar.gz", ".tgz")
_MAGIC = {b"\x1f\x8b": "gzip", b"BZh": "bzip2", b"\xfd7zXZ\x00": "xz", b"\x28\xb5\x2f\xfd": "zstd"}
UNIT_BYTES = 8 * 2**20  # a unit is at most this many bytes of members (or one sample)...
UNIT_SAMPLES = 256  # ...and at most this many samples
SCANS_KEPT = 4096  # tar member tables the service keeps, by file version
READING = "webdataset-1.0"  # the naming and decoding rules units are read by (part of every identity)
MISSING_NAMED = 5  # samples an error lists by key
MAX_FIELDS = 1024  # distinct fields a dataset may have: more are names, not columns


@dataclass(frozen=True)
class TarMembers:
    """One tar's samples: member j of sample i is members[starts[i] + j]."""

    keys: tuple[str, ...]
    starts: np.ndarray  # [samples + 1] into the member arrays
    fields: tuple[str, ...]  # each member's field (its lower-cased extension)
    offsets: np.ndarray  # [members] where its data starts in the file
    sizes: np.ndarray  # [members]

    def lacking(self, field: str) -> np.ndarray:
        """The samples that have no member `field` (every sample has at least one member)."""
        if not self.keys:
            return np.empty(0, dtype=np.int64)
        has = np.fromiter((f == field for f in self.fields), dtype=np.int64, count=len(self.fields))
        return np.flatnonzero(np.add.reduceat(has, self.starts[:-1]) == 0)


@dataclass(frozen=True)
class TarLayout:
    url: str
    members: TarMembers
    unit_starts: tuple[int, ...]  # each unit's first sample
    fields: tuple[str, ...]  # the dataset's fields (the union): what a read of all columns returns

    def sample_name(self, row: int) -> str:
        return f"sample {self.members.keys[row]!r} of {self.url}"


def compression(url: str, first: bytes) -> str | None:
    """The compression a tar's name or first bytes show, if any."""
    for magic, name in _MAGIC.items():
        if first.startswith(magic):
            return name
    return "gzip" if url.lower().endswith(COMPRESSED_SUFFIXES) else None


def _refuse_compressed(url: str, kind: str) -> UnreadableShard:
    return UnreadableShard(
        f"{url!r} is a {kind}-compressed tar: the webdataset format reads uncompressed tars only, since a "
        f"unit is a byte range of the tar and a {kind} stream would have to be decompressed from its start "
        "for every unit; decompress it (e.g. gunzip) and open the .tar")


def scan_tar(url: str, size: int) -> TarMembers:
    """Read a tar's headers: its samples and where each member's data lies."""
    fs, path = fsspec.core.url_to_fs(url)
    keys: list[str] = []
    starts: list[int] = []
    fields: list[str] = []
    offsets: list[int] = []
    sizes: list[int] = []
    with fs.open(path, "rb", block_size=2**20) as f:
        kind = compression(url, f.read(6))
        if kind is not None:
            raise _refuse_compressed(url, kind)
        f.seek(0)
        try:
            with tarfile.open(fileobj=f, mode="r:") as tar:
                for member in tar:
                    if not member.isreg() or is_metadata(member.name):
                        continue
                    named = key_and_field(member.name)
                    if named is None:
                        continue
                    key, field = named
                    if not keys or keys[-1] != key:
                        keys.append(key)
                        starts.append(len(fields))
                    elif field in fields[starts[-1]:]:
                        raise UnreadableShard(f"{url!r} has field {field!r} twice in sample {key!r} "
                                              f"(member {member.name!r} at byte {member.offset}; fields are "
                                              "extensions, lower-cased)")
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


SCANS: KeptScans[TarMembers] = KeptScans(SCANS_KEPT)  # member tables by file version


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


def _scan(url: str) -> tuple[str, int, str, TarMembers]:
    if url.lower().endswith(COMPRESSED_SUFFIXES):  # refused before any byte is read
        raise _refuse_compressed(url, "gzip")
    _, _, size, version = stat_file(url, "shard")
    try:
        members = SCANS.get((url, size, version), lambda: scan_tar(url, size))
    except UnreadableShard:
        raise
    except OSError as exc:  # the store, mid-scan
        raise UnreadableShard(f"{url!r} cannot be read: {exc}") from None
    return url, size, version, members


def _shard(url: str, size: int, version: str, members: TarMembers, fields: tuple[str, ...]) -> Shard:
    firsts = _units(members)
    samples = len(members.keys)
    rows = tuple(b - a for a, b in zip(firsts, [*firsts[1:], samples], strict=True))
    reading = f"webdataset unit={UNIT_BYTES}/{UNIT_SAMPLES} {READING}"
    if set(members.fields) != set(fields):  # a read of all columns gives the dataset's fields
        reading += f" fields={','.join(fields)}"
    return Shard(url=url, size=size, num_rows=samples, row_group_rows=rows, version=version,
                 format="webdataset", reading=reading, layout=TarLayout(url, members, firsts, fields))


def _check_present(found: list[tuple[str, int, str, TarMembers]], columns: tuple[str, ...]) -> None:
    """Every sample has every field the job names, or the job is refused naming those that lack one."""
    for column in columns:
        lacking = [(url, members.keys[i]) for url, _, _, members in found for i in members.lacking(column)]
        if lacking:
            named = ", ".join(f"{key!r} of {url}" for url, key in lacking[:MISSING_NAMED])
            more = f" and {len(lacking) - MISSING_NAMED} more" if len(lacking) > MISSING_NAMED else ""
            raise SchemaMismatch(f"{len(lacking)} sample(s) have no field {column!r} that columns= names: "
                                 f"{named}{more}")


class WebDatasetFormat:
    name = "webdataset"

    def index(self, dataset: tuple[str, ...], args: dict[str, Any], columns: tuple[str, ...],
              allow: Allow) -> DatasetIndex:
        take_args(self.name, args, {})
        urls = resolve_urls(dataset, allow, SUFFIXES, "WebDataset tar")
        log.info("indexing %d tar shard(s) of %s", len(urls), list(dataset))
        found = in_parallel(_scan, urls, "shards")
        fields = tuple(sorted({field for *_, members in found for field in members.fields}))
        if len(fields) > MAX_FIELDS:
            raise SchemaMismatch(
                f"the tar shards of {list(dataset)} have {len(fields)} distinct fields (e.g. {list(fields[:5])}), "
                f"more than the {MAX_FIELDS} a dataset's columns may be: a field is what follows the first dot "
                "of a member's file name, so names with a dot before the sample key (macOS '._0001.jpg' files, "
                "'v1.2_0001.jpg') give a field per sample; rewrite the tars without them")
        schema = pa.schema([(field, field_type(field)) for field in fields])
        schema = check_columns(schema, columns, f"the tar shards of {list(dataset)} (fields by extension)")
        _check_present(found, columns)
        shards = tuple(_shard(url, size, version, members, fields) for url, size, version, members in found)
        return DatasetIndex(shards=shards, schema=schema, format=self.name)

    def read_unit(self, shard: Shard, unit: int, columns: tuple[str, ...] | None,
                  storage: UnitStorage) -> pa.Table:
        layout: TarLayout = shard.layout
        m = layout.members
        first = layout.unit_starts[unit]
        last = first + shard.row_group_rows[unit]
        a, b = int(m.starts[first]), int(m.starts[last])
        begin, end = int(m.offsets[a]), int(m.offsets[b - 1] + m.sizes[b - 1])
        data = storage.read_range(shard.url, shard.version, begin, end)
        names = columns if columns is not None else layout.fields
        values: dict[str, list[Any]] = {name: [None] * (last - first) for name in names}
        for row in range(first, last):
            for j in range(int(m.starts[row]), int(m.starts[row + 1])):
                field = m.fields[j]
                if field in values:
                    at = int(m.offsets[j]) - begin
                    values[field][row - first] = _value(field, data[at: at + int(m.sizes[j])], layout, row)
        return pa.table({name: pa.array(values[name], type=field_type(name)) for name in names})


def _value(field: str, data: bytes, layout: TarLayout, row: int) -> Any:
    """A field's value as WebDataset's default decoder gives it (JSON as its text)."""
    where = f"field {field!r} of {layout.sample_name(row)}"
    if gzipped(field):
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise UnreadableShard(f"{where} is not gzip data: {exc}") from None
    kind = decoded_by(field)
    try:
        if kind in INTEGER_FIELDS:
            value = int(data)
            if not -2**63 <= value < 2**63:
                raise UnreadableShard(f"{where} holds {value}, beyond int64")
            return value
        if kind in TEXT_FIELDS:
            return data.decode("utf-8")
        if kind in JSON_FIELDS:
            json.loads(data)
            return data.decode(json.detect_encoding(data))
    except UnicodeDecodeError:
        raise UnreadableShard(f"{where} holds {data[:40]!r}, not UTF-8 text") from None
    except ValueError as exc:
        what = "an integer" if kind in INTEGER_FIELDS else "JSON"
        raise UnreadableShard(f"{where} holds {data[:40]!r}, not {what} ({exc})") from None
    return data


__all__ = ["SUFFIXES", "WebDatasetFormat", "compression", "scan_tar"]
