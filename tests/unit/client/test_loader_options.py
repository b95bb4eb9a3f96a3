"""RemoteLoader's keywords, derived from the declarations: the flat ones, the four groups, every
grouped option still taken flat, help(RemoteLoader), and refusals as Python's own."""

from __future__ import annotations

import dataclasses
import inspect
import pydoc

import pytest

from shardstream.client import (
    DeliveryOptions,
    FormatOptions,
    OrderOptions,
    RemoteLoader,
    SecurityOptions,
)
from shardstream.client.loader_options import DECLARED, LoaderSettings, split
from shardstream.proto.errors import InvalidJobSpec
from shardstream.proto.job_options import JobOptions

# Every keyword RemoteLoader took before its options were declared once (its signature then).
KEYWORDS_BEFORE = (
    "address dataset batch_size shuffle seed drop_last transform transform_args columns rank world_size "
    "pin_memory prefetch prefetch_bytes on_corrupt job_name timeout connect_timeout reconnect_timeout tls "
    "shared_memory bulk_socket shuffle_block format format_args seq_len dtype url_column collate pad_value "
    "weights bucket_by bucket_window nulls priority token token_file").split()
GROUPS = {"order": OrderOptions, "format_options": FormatOptions, "delivery": DeliveryOptions,
          "security": SecurityOptions}


def test_every_keyword_of_before_is_still_an_option() -> None:
    assert set(KEYWORDS_BEFORE) - {"address"} <= {f.name for f, _, _ in DECLARED}


def test_help_shows_every_option_with_its_declared_help() -> None:
    text = pydoc.render_doc(RemoteLoader, renderer=pydoc.plaintext)
    for f, declared, _ in DECLARED:
        assert f"{f.name}: {declared.help[:40]}" in " ".join(text.split()), f.name
    shown = inspect.signature(RemoteLoader).parameters
    flat = [f.name for f, declared, _ in DECLARED if not declared.group]
    assert list(shown)[:len(flat) + 1] == ["address", *flat]
    assert [p for p in shown if p in GROUPS] == list(GROUPS)
    assert shown["options"].kind is inspect.Parameter.VAR_KEYWORD  # every grouped option, flat


def test_each_group_holds_its_declared_options() -> None:
    for cls in GROUPS.values():
        members = {f.name for f in dataclasses.fields(cls)}
        assert members == {f.name for f, d, _ in DECLARED if d.group == cls.group}  # type: ignore[attr-defined]
        assert all(f.default is None for f in dataclasses.fields(cls))  # None: not given, the default applies
    assert {d.group for _, d, _ in DECLARED} == {"", "order", "format", "delivery", "security"}


def test_groups_and_flat_keywords_give_the_same_options() -> None:
    grouped = split({"order": OrderOptions(bucket_by="n", bucket_window=4),
                     "format_options": FormatOptions(collate="pad", nulls="mask"),
                     "delivery": DeliveryOptions(prefetch_bytes=1024), "security": SecurityOptions(token="t")},
                    {"seed": 3})
    flat = split({}, {"bucket_by": "n", "bucket_window": 4, "collate": "pad", "nulls": "mask",
                      "prefetch_bytes": 1024, "token": "t", "seed": 3})
    assert grouped == flat
    job, settings = grouped
    assert JobOptions.given(dataset="/d", batch_size=2, **job).bucket_window == 4
    assert LoaderSettings(**settings).prefetch_bytes == 1024


def test_careless_calls_are_refused_as_python_refuses_them() -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'sead'"):
        split({}, {"sead": 1})
    with pytest.raises(TypeError, match="got weights twice: in order and as a keyword"):
        split({"order": OrderOptions(weights="w")}, {"weights": "v"})
    with pytest.raises(TypeError, match="order must be a OrderOptions, got DeliveryOptions"):
        split({"order": DeliveryOptions(prefetch_bytes=1)}, {})
    with pytest.raises(TypeError, match="unexpected keyword argument"):
        OrderOptions(collate="pad")  # a format option in the order group
    with pytest.raises(InvalidJobSpec, match="prefetch must be >= 1, got 0"):
        LoaderSettings(prefetch=0)
    with pytest.raises(InvalidJobSpec, match="pin_memory must be 'auto', True or False"):
        LoaderSettings(pin_memory="yes")


def test_a_bad_option_is_refused_before_any_connection() -> None:
    # port 9 (discard) is never a service: the refusal comes before a connection is tried
    with pytest.raises(InvalidJobSpec, match="batch_size must be > 0"):
        RemoteLoader("127.0.0.1:9", dataset="/d", batch_size=0, connect_timeout=0.1)
    with pytest.raises(InvalidJobSpec, match="bucket_window needs bucket_by"):
        RemoteLoader("127.0.0.1:9", dataset="/d", batch_size=2, order=OrderOptions(bucket_window=8))
