"""How WebDataset (the ``webdataset`` package, 1.0.x) names a tar member's sample and field, and
how its default ``.decode()`` types a field: the rules the webdataset format reads tars by.

- A member counts when it is a regular file (not a directory, link or device) and is not
  metadata: a top-level name ``__x__``, or a name starting ``__x__/`` or equal to ``__x__``.
- Its name splits as ``base_plus_ext``: the key is everything up to the first dot of the part
  after the last ``/`` that leaves a non-empty base (``train/0001.seg.png`` is key
  ``train/0001``, field ``seg.png``); directories stay in the key; a name without such a dot
  belongs to no sample. The regex is WebDataset's own, including its odd cases
  (``train/.hidden.jpg`` is key ``train/``, field ``hidden.jpg``).
- The field is lower-cased (``0001.JPG`` is field ``jpg``); the key keeps its case.
- Consecutive members with one key are one sample; the same field twice in a sample is an error.
- A field named ``__x...`` is metadata to WebDataset's decoder: UTF-8 text.
- Any other field is decoded by its last dot-separated part (``en.txt`` is text, ``label.cls`` an
  integer), after one trailing ``.gz`` is decompressed (``txt.gz`` is text, ``gz`` bytes).
"""

from __future__ import annotations

import re

import pyarrow as pa

INTEGER_FIELDS = ("cls", "cls2", "index", "inx", "id")  # webdataset's decoders: int(data)
TEXT_FIELDS = ("txt", "text", "transcript")  # data.decode("utf-8")
JSON_FIELDS = ("json", "jsn")  # json.loads(data): kept here as its text, checked to parse
_BASE_PLUS_EXT = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")  # tariterators.base_plus_ext
_SKIP_META = re.compile(r"__[^/]*__($|/)")  # tar_file_iterator's skip_meta, matched at the start


def is_metadata(name: str) -> bool:
    """A member WebDataset skips before grouping."""
    if not name.startswith("__"):  # both rules need it (most members: no regex)
        return False
    if "/" not in name and name.endswith("__"):
        return True
    return _SKIP_META.match(name) is not None


def key_and_field(name: str) -> tuple[str, str] | None:
    """(sample key, field) of a member name, or None when it names no field."""
    match = _BASE_PLUS_EXT.match(name)
    if match is None:
        return None
    return match.group(1), match.group(2).lower()


def gzipped(field: str) -> bool:
    """Whether WebDataset's default decoder gunzips this field before decoding it."""
    return not field.startswith("__") and (field.endswith(".gz") or field == "gz")


def decoded_by(field: str) -> str:
    """The extension that picks a field's decoder: its last part, after one ``.gz`` is removed
    ("txt" for a ``__`` field, which WebDataset decodes as text whatever follows)."""
    if field.startswith("__"):
        return "txt"
    if field == "gz":
        return ""
    if field.endswith(".gz"):
        field = field[:-3]
    return field.rsplit(".", 1)[-1]


def field_type(field: str) -> pa.DataType:
    """A field's column type: int64 for integer fields, string for text and JSON, else binary."""
    kind = decoded_by(field)
    if kind in INTEGER_FIELDS:
        return pa.int64()
    if kind in TEXT_FIELDS or kind in JSON_FIELDS:
        return pa.string()
    return pa.binary()


__all__ = ["INTEGER_FIELDS", "JSON_FIELDS", "TEXT_FIELDS", "decoded_by", "field_type", "gzipped", "is_metadata",
           "key_and_field"]
