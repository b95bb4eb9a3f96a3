"""JSON Lines (``format="jsonl"``): each non-blank line is one JSON object, one sample; its keys are columns.

The files (``*.jsonl``, ``*.ndjson`` in a directory; any file named
explicitly, ``.json`` included) are concatenated in sorted path order; sample
i is the i-th non-blank line of that concatenation, and its values are what
``json.loads(line)`` gives (jsonl_values.py says which values a column
carries). A blank line (only JSON whitespace) is no sample, and a last line
without ``\\n`` is one. Lines end at ``\\n`` (CRLF files read the same); a
UTF-8 byte order mark opening a file is skipped.

N must be exact when the job opens, so each file is read once then, in chunks
and in parallel, and its lines found and cut into units of about 4,096 lines
or 4 MiB, each a byte range (jsonl_lines.py); the scan is kept per file
version, so a second job over the same files does not read them again. A line
longer than ``max_line_bytes`` (the service's ``max_line_bytes`` setting) is
refused then, naming it, before a decoder would hold it. Compressed files
(``.jsonl.gz``, ``.zst``..., or compressed bytes under any name) are refused
by name: a unit is a byte range, which a compressed stream does not have.

The columns are given in ``format_args={"schema": {"text": "string", ...}}``,
or else inferred from the first unit of the first file holding samples: each
key seen there, in the order first seen, typed by its values. A later value
that does not fit its column, a line that is not UTF-8, not JSON or not an
object, is one corrupt sample named by file and line (failed, or replaced
under ``on_corrupt="skip"``); a key the schema does not have is not read; a
key a line lacks is null. Reading a unit reads exactly its byte range, checked
against the file version the job indexed.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import fsspec
import pyarrow as pa

from shardstream.proto.errors import (
    DatasetChanged,
    InvalidJobSpec,
    SchemaMismatch,
    ShardstreamError,
    UnreadableShard,
)
from shardstream.service.dataset import (
    UNREADABLE_COLUMN,
    DatasetIndex,
    Shard,
    check_columns,
    in_parallel,
    resolve_urls,
    stat_file,
)
from shardstream.service.file_identity import check_opened
from shardstream.service.formats import jsonl_lines as lines_of
from shardstream.service.formats.base import Allow, UnitStorage, take_args
from shardstream.service.formats.jsonl_lines import LineScan, is_blank, scan_lines
from shardstream.service.formats.jsonl_values import (
    column,
    infer_type,
    parse_line,
    parse_type,
    type_name,
)
from shardstream.service.formats.kept_scans import KeptScans
from shardstream.service.limits import DEFAULT_LIMITS
from shardstream.service.node.pinned_object import PinnedObject, pinned_version

log = logging.getLogger(__name__)

COMPRESSIONS = (".gz", ".zst", ".zstd", ".bz2", ".xz", ".lz4")
_MAGIC = {b"\x1f\x8b": "gzip", b"\xfd7zXZ\x00": "xz", b"\x28\xb5\x2f\xfd": "zstd", b"\x04\x22\x4d\x18": "lz4"}
# A directory's JSON Lines files; compressed ones are listed to be refused by name.
SUFFIXES = tuple(base + c for base in (".jsonl", ".ndjson") for c in ("", *COMPRESSIONS))
READING = "jsonl-1"  # the line, blank-line and value rules units are read by (part of every identity)
SCANS_KEPT = 4096  # files' scans the service keeps, by file version
MAX_COLUMNS = 1024  # distinct keys the inferred schema may have: more are names, not columns
OPTIONS: dict[str, Any] = {"schema": None, "max_line_bytes": DEFAULT_LIMITS.line_bytes}


@dataclass(frozen=True)
class JsonlLayout:
    """What reading a file's units needs: their byte ranges and first lines, the schema, and
    where it came from (for errors)."""

    url: str
    scan: LineScan
    schema: pa.Schema
    source: str  # "inferred from lines 1..4096 of ...", "given in format_args schema"

    def sample_name(self, row: int) -> str:
        line = self.scan.line_of(row)
        if line is not None:
            return f"line {line} of {self.url}"
        return f"non-blank line {row + 1} of {self.url}"


@dataclass(frozen=True)
class _File:
    url: str
    size: int
    version: str
    scan: LineScan


@contextlib.contextmanager
def _opened(url: str, version: str) -> Iterator[Any]:
    """The file at the version the job pins (DatasetChanged if it is another), for reading from its start."""
    fs, path = fsspec.core.url_to_fs(url)
    with fs.open(path, "rb", block_size=lines_of.SCAN_CHUNK) as raw:
        check_opened(url, version, fs, path, raw)
        pin = pinned_version(url, version)
        yield PinnedObject(fs, path, url, pin, int(raw.size)) if pin is not None else raw


def _refuse_compressed(url: str, kind: str) -> UnreadableShard:
    return UnreadableShard(
        f"{url!r} is {kind}-compressed: the jsonl format reads uncompressed files only, since a unit is a byte "
        f"range of the file and a {kind} stream would have to be decompressed from its start for every unit; "
        "decompress it and open the plain file")


def _compression(head: bytes) -> str | None:
    """The compression a file's first bytes show; none of them starts a line of UTF-8 JSON."""
    for magic, kind in _MAGIC.items():
        if head.startswith(magic):
            return kind
    if head[:3] == b"BZh" and head[4:10] == b"1AY&SY":  # with the block size between: "BZh9" alone is text
        return "bzip2"
    return None


def _scan_file(url: str, size: int, version: str) -> LineScan:
    with _opened(url, version) as f:
        kind = _compression(f.read(10))
        if kind is not None:
            raise _refuse_compressed(url, kind)
        f.seek(0)
        scan = scan_lines(f)
        read = f.tell()
    if read != size:
        raise DatasetChanged(f"{url!r} changed while the job opened it: it was {size} bytes when listed, "
                             f"{read} when read; open the job again")
    return scan


SCANS: KeptScans[LineScan] = KeptScans(SCANS_KEPT)  # files' scans by version


def _scan(url: str) -> _File:
    if url.lower().endswith(COMPRESSIONS):  # refused before any byte is read
        raise _refuse_compressed(url, url.rsplit(".", 1)[-1])
    _, _, size, version = stat_file(url, "JSON Lines file")
    try:
        return _File(url, size, version, SCANS.get((url, size, version, lines_of.UNIT_BYTES, lines_of.UNIT_LINES),
                                               lambda: _scan_file(url, size, version)))
    except ShardstreamError:
        raise
    except OSError as exc:  # the store, mid-scan
        raise UnreadableShard(f"{url!r} cannot be read: {type(exc).__name__}: {exc}") from None


def _max_line_bytes(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise InvalidJobSpec(f"format 'jsonl' max_line_bytes must be a positive int (bytes), got {value!r}")
    return value


def _declared(schema: Any) -> pa.Schema:
    """format_args schema: {column: type name}, in the order given."""
    if not isinstance(schema, dict) or not schema:
        raise InvalidJobSpec(f"format 'jsonl' schema must be an object of column names to types "
                             f"({{'text': 'string', 'ids': 'list<int64>'}}), got {schema!r}")
    if UNREADABLE_COLUMN in schema:
        raise InvalidJobSpec(f"format 'jsonl' schema: {UNREADABLE_COLUMN!r} is a column of shardstream's own")
    return pa.schema([(name, parse_type(kind, name)) for name, kind in schema.items()])


def _parsed_unit(data: bytes, first_line: int) -> list[tuple[int, dict[str, Any] | None, str | None]]:
    """Each sample line of a unit's bytes: (line number, its object or None, why it is no sample or None)."""
    found = []
    for number, line in enumerate(data.split(b"\n"), start=first_line):
        if not is_blank(line):
            found.append((number, *parse_line(line)))
    return found


def _inferred(file: _File, columns: tuple[str, ...]) -> tuple[pa.Schema, str]:
    """The schema of the keys in the first unit of `file` (`columns` of them, if given)."""
    scan = file.scan
    with _opened(file.url, file.version) as f:
        f.seek(int(scan.starts[0]))
        data = f.read(int(scan.ends[0] - scan.starts[0]))
    parsed = _parsed_unit(data, int(scan.first_lines[0]))
    read = f"lines {parsed[0][0]}..{parsed[-1][0]} of {file.url}"
    objects = [(number, obj) for number, obj, _ in parsed if obj is not None]
    if not objects:
        number, _, why = parsed[0]
        raise UnreadableShard(f"no line of {read} is a JSON object (line {number} {why}): is {file.url!r} JSON Lines, "
                              "one object per line?")
    keys: dict[str, None] = {}
    for _, obj in objects:
        keys.update(dict.fromkeys(obj))
        if len(keys) > MAX_COLUMNS and not columns:
            raise SchemaMismatch(f"the objects of {read} have more than {MAX_COLUMNS} distinct keys: keys that are "
                                 "data (ids, words) are no columns; name the columns to read with columns=[...] or "
                                 "format_args schema={...}")
    missing = [c for c in columns if c not in keys]
    if missing:
        raise InvalidJobSpec(f"column(s) {missing} are on no line of {read}, whose keys are {list(keys)[:50]}: the "
                             "schema is inferred from those lines; declare the columns with format_args schema={...}")
    names = list(columns) if columns else list(keys)
    if UNREADABLE_COLUMN in names:
        raise UnreadableShard(f"the objects of {read} have a key {UNREADABLE_COLUMN!r}, a column of shardstream's "
                              "own; leave it out with columns=[...]")
    numbers = [number for number, _ in objects]
    where = lambda number: f"line {number} of {file.url}"  # noqa: E731
    fields = [(name, infer_type(name, [obj.get(name) for _, obj in objects], numbers, where, read)) for name in names]
    return pa.schema(fields), f"inferred from {read}"


def _shard(file: _File, schema: pa.Schema, source: str) -> Shard:
    digest = hashlib.sha256(schema.to_string(show_schema_metadata=False).encode()).hexdigest()[:16]
    reading = f"{READING} unit={lines_of.UNIT_BYTES}/{lines_of.UNIT_LINES} schema={digest}"
    return Shard(url=file.url, size=file.size, num_rows=file.scan.samples,
                 row_group_rows=tuple(int(c) for c in file.scan.counts), version=file.version, format="jsonl",
                 reading=reading, layout=JsonlLayout(file.url, file.scan, schema, source))


class JsonlFormat:
    name = "jsonl"

    def index(self, dataset: tuple[str, ...], args: dict[str, Any], columns: tuple[str, ...],
              allow: Allow) -> DatasetIndex:
        args = take_args(self.name, args, OPTIONS)
        max_line = _max_line_bytes(args["max_line_bytes"])
        declared = _declared(args["schema"]) if args["schema"] is not None else None
        urls = resolve_urls(dataset, allow, SUFFIXES, "JSON Lines")
        log.info("indexing %d JSON Lines file(s) of %s", len(urls), list(dataset))
        files: list[_File] = in_parallel(_scan, urls, "files")
        for file in files:
            if file.scan.longest > max_line:
                raise UnreadableShard(
                    f"line {file.scan.longest_line} of {file.url!r} is {file.scan.longest:,} bytes, longer than "
                    f"max_line_bytes {max_line:,} (format_args max_line_bytes; at most the service's max_line_bytes "
                    "setting, --max-line-bytes or SHARDSTREAM_MAX_LINE_BYTES)")
        first = next((file for file in files if file.scan.samples), None)
        if declared is not None:
            schema, source = check_columns(declared, columns, "format_args schema"), "given in format_args schema"
        elif first is not None:
            schema, source = _inferred(first, columns)
        else:  # no samples: the registry says so
            schema, source = pa.schema([]), "no lines"
        log.info("JSON Lines %s: %d samples, columns %s", list(dataset), sum(f.scan.samples for f in files),
                 ", ".join(f"{f.name}: {type_name(f.type)}" for f in schema))
        shards = tuple(_shard(file, schema, source) for file in files)
        return DatasetIndex(shards=shards, schema=schema, format=self.name)

    def read_unit(self, shard: Shard, unit: int, columns: tuple[str, ...] | None,
                  storage: UnitStorage) -> pa.Table:
        layout: JsonlLayout = shard.layout
        scan = layout.scan
        data = storage.read_range(shard.url, shard.version, int(scan.starts[unit]), int(scan.ends[unit]))
        parsed = _parsed_unit(data, int(scan.first_lines[unit]))
        if len(parsed) != shard.row_group_rows[unit]:
            raise UnreadableShard(f"{shard.url!r}: unit {unit} (bytes {scan.starts[unit]}..{scan.ends[unit]}) holds "
                                  f"{len(parsed)} sample lines, not the {shard.row_group_rows[unit]} indexed")
        reasons = [None if why is None else f"line {number} {why}" for number, _, why in parsed]
        arrays: dict[str, pa.Array] = {}
        for name in columns if columns is not None else layout.schema.names:
            kind = layout.schema.field(name).type
            values, misfits = column([None if obj is None else obj.get(name) for _, obj, _ in parsed], kind)
            for row, why in misfits.items():
                reasons[row] = reasons[row] or (f"line {parsed[row][0]}: key {name!r} {why} (the schema was "
                                                f"{layout.source})")
            arrays[name] = values
        arrays[UNREADABLE_COLUMN] = pa.array(reasons, pa.string())
        return pa.table(arrays)


__all__ = ["SCANS", "SUFFIXES", "JsonlFormat", "JsonlLayout"]
