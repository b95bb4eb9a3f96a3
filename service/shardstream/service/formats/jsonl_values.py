"""JSON values as Arrow columns: what ``json.loads`` gives, exactly, or a reason it cannot be carried.

Each line is parsed by ``json.loads`` itself (after a strict UTF-8 decode), so
a sample is what a user's own ``json.loads(line)`` gives. A column holds one
of: ``bool``, ``int64``, ``float64``, ``string``, or ``list<T>`` of those
(lists of lists too). A column whose values are integers and floats is
float64 (its integers within +-2^53, where a float holds them exactly).
Everything else is refused by name, never converted: an integer beyond int64,
a JSON object (its keys differ from line to line, and Arrow's struct would
fill the missing ones with nulls that ``json.loads`` does not give), a
string holding a lone surrogate escape (``"\\ud800"``: not UTF-8), a list
mixing types.

Arrow converts a column's Python values in one pass and infers their type;
a type that is the column's (or widens to it: integers to floats, nulls to
anything) is taken as it is. Only when it is not are the values looked at one
by one, to find which do not fit (pyarrow would otherwise truncate 1.5 into
an int64 column, or make ``true`` 1.0 in a float one).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from shardstream.proto.errors import InvalidJobSpec, SchemaMismatch, UnreadableShard

SCALARS = {"bool": pa.bool_(), "int64": pa.int64(), "float64": pa.float64(), "string": pa.string()}
SHOWN = 40  # characters of a value quoted in an error


def parse_line(line: bytes) -> tuple[dict[str, Any] | None, str | None]:
    """(the line's object, None), or (None, why it is no sample): not UTF-8, not JSON, not an object."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, f"is not UTF-8 text (byte {exc.start + 1} of the line is {line[exc.start:exc.start + 1]!r})"
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, f"is not JSON ({exc.msg.removesuffix(' at')} at character {exc.pos + 1} of the line)"
    except RecursionError:
        return None, "is not JSON Python can read: it nests deeper than its parser recurses"
    except ValueError as exc:  # an integer of more digits than Python converts
        return None, f"is not JSON Python can read ({exc})"
    if not isinstance(value, dict):
        return None, f"holds {json_kind(value)}, not a JSON object"
    return value, None


def json_kind(value: Any) -> str:
    """What a parsed JSON value is, in words."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a bool"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a float"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "a JSON object"


def shown(value: Any) -> str:
    """A value as JSON, cut short, for an error (escaped where it is no UTF-8: a lone surrogate)."""
    text = json.dumps(value, ensure_ascii=False)
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = json.dumps(value)
    return text if len(text) <= SHOWN else text[:SHOWN] + "..."


def type_name(kind: pa.DataType) -> str:
    """A column type as format_args schema names it ("list<int64>")."""
    if pa.types.is_list(kind):
        return f"list<{type_name(kind.value_type)}>"
    for name, scalar in SCALARS.items():
        if kind == scalar:
            return name
    return str(kind)


def parse_type(name: Any, column: str) -> pa.DataType:
    """A column type from its name in format_args schema: bool, int64, float64, string, list<T>."""
    if isinstance(name, str):
        text = name.strip()
        if text in SCALARS:
            return SCALARS[text]
        if text.startswith("list<") and text.endswith(">"):
            return pa.list_(parse_type(text[5:-1], column))
    raise InvalidJobSpec(f"format 'jsonl' schema: column {column!r} has type {name!r}; a type is one of "
                         f"{', '.join(SCALARS)} or list<T> of them (e.g. 'list<int64>')")


def carried(kind: pa.DataType, nulls: bool = False) -> bool:
    """Whether a column may have this type: the scalars, lists of them, lists of those (with
    `nulls`, a value's type too: null where its lists are empty)."""
    if pa.types.is_list(kind):
        return carried(kind.value_type, nulls)
    return kind in SCALARS.values() or (nulls and pa.types.is_null(kind))


def _undecided(kind: pa.DataType) -> bool:
    """Only nulls (or empty lists) were seen: the values do not say the type."""
    if pa.types.is_list(kind):
        return _undecided(kind.value_type)
    return pa.types.is_null(kind)


def _widens(found: pa.DataType, kind: pa.DataType) -> bool:
    """Whether values inferred as `found` are values of `kind` (a cast losing nothing, or refusing)."""
    if found == kind or pa.types.is_null(found):
        return True
    if pa.types.is_list(found) and pa.types.is_list(kind):
        return _widens(found.value_type, kind.value_type)
    return found == pa.int64() and kind == pa.float64()  # the cast refuses what a float cannot hold


def _unify(a: pa.DataType, b: pa.DataType) -> pa.DataType | None:
    """The type holding values of both (integers and floats: float64); None when there is none."""
    if _widens(a, b):
        return b
    if _widens(b, a):
        return a
    if pa.types.is_list(a) and pa.types.is_list(b):
        inner = _unify(a.value_type, b.value_type)
        return pa.list_(inner) if inner is not None else None
    return None


def value_type(value: Any) -> pa.DataType | str:
    """The type of one value (not None), or what it is when no column type carries it."""
    if isinstance(value, dict):
        return f"a JSON object ({shown(value)})"
    try:
        found = pa.array([value]).type
    except OverflowError:
        return f"{shown(value)}, {'an integer' if isinstance(value, int) else 'a list holding an integer'} beyond int64"
    except UnicodeEncodeError:
        return f"{shown(value)}, a string with a lone surrogate escape (such as \\ud800), which UTF-8 cannot hold"
    except (pa.ArrowException, TypeError, ValueError):
        return f"{shown(value)}, a list mixing types"
    return found if carried(found, nulls=True) else f"{shown(value)}, a list holding objects"


def infer_type(name: str, values: list[Any], lines: list[int], where: Callable[[int], str], read: str) -> pa.DataType:
    """The type of column `name` from its values (None: null) on `lines` (`read` names them all):
    the one type they share (integers and floats: float64). Values no column carries do not count
    (they are corrupt samples when read) unless there are no others. SchemaMismatch naming two
    lines that disagree, or saying that no value shows the type; UnreadableShard when only values
    that no type carries do."""
    try:
        found = pa.array(values).type  # one pass: the common case
        if carried(found):
            return found
    except (pa.ArrowException, OverflowError, TypeError, ValueError):
        pass
    kind: pa.DataType | None = None
    first = 0  # the line that showed `kind`
    refused: tuple[int, str] | None = None
    for line, value in zip(lines, values, strict=True):
        if value is None:
            continue
        one = value_type(value)
        if isinstance(one, str):
            refused = refused or (line, one)
        elif kind is None:
            kind, first = one, line
        else:
            unified = _unify(kind, one)
            if unified is None:
                raise SchemaMismatch(
                    f"column {name!r} holds {type_name(kind)} at {where(first)} but {type_name(one)} at "
                    f"{where(line)}: a column has one type. Leave it out with columns=[...], or declare its type "
                    "with format_args schema={...} to read the lines whose values fit it (the others are corrupt "
                    "samples)")
            if _undecided(kind) and not _undecided(unified):
                first = line
            kind = unified
    if kind is not None and not _undecided(kind):
        return kind
    if refused is not None and kind is None:
        line, why = refused
        raise UnreadableShard(f"column {name!r} holds {why} at {where(line)}, which no column type carries: the jsonl "
                              "format's columns hold bools, integers (int64), floats, strings and lists of them; leave "
                              "it out with columns=[...]")
    raise SchemaMismatch(f"column {name!r} is null{' or empty lists' if kind is not None else ''} on every line of "
                         f"{read}: its type cannot be inferred. Declare it with format_args schema={{...}} "
                         "('string', 'int64', 'list<int64>', ...) or leave it out with columns=[...]")


def misfit(value: Any, kind: pa.DataType) -> str | None:
    """Why `value` (not None) cannot be a value of a `kind` column; None when it can."""
    found = value_type(value)
    if isinstance(found, str):
        return f"holds {found}, which no column type carries"
    if not _widens(found, kind):
        return f"holds {json_kind(value)} ({shown(value)}) where the column is {type_name(kind)}"
    if found != kind:
        try:
            pa.array([value]).cast(kind)
        except pa.ArrowInvalid:
            return f"holds {shown(value)}: a float64 column holds integers within +-2^53 only"
    return None


def column(values: list[Any], kind: pa.DataType) -> tuple[pa.Array, dict[int, str]]:
    """`values` (None: null) as an array of `kind`, and why each value that does not fit does
    not (by position; that row is null)."""
    try:
        found = pa.array(values)
        if _widens(found.type, kind):
            return (found if found.type == kind else found.cast(kind)), {}
    except (pa.ArrowException, OverflowError, TypeError, ValueError):  # UnicodeEncodeError too
        pass
    why: dict[int, str] = {}
    for i, value in enumerate(values):
        if value is not None:
            reason = misfit(value, kind)
            if reason is not None:
                why[i] = reason
    kept = [None if i in why else value for i, value in enumerate(values)]
    return pa.array(kept, type=kind), why


__all__ = ["SCALARS", "carried", "column", "infer_type", "json_kind", "misfit", "parse_line", "parse_type", "shown",
           "type_name", "value_type"]
