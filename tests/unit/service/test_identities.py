"""The tokens file (identities.py), the `authorization` header, what an identity's grants admit
(control/auth.py Gate), and the client's token (client/auth.py): no server, no Ray."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pytest

from shardstream.client.auth import Token
from shardstream.proto.errors import (
    DatasetNotAllowed,
    InvalidJobSpec,
    PermissionDenied,
    TransformNotAllowed,
    Unauthenticated,
)
from shardstream.proto.job_options import JobOptions
from shardstream.service.config import ServiceConfig
from shardstream.service.control.auth import Gate
from shardstream.service.identities import (
    IdentityFile,
    Refusals,
    authenticate,
    parse_identities,
    parse_text,
    token_digest,
)
from tests.identities import TOKENS, entry, write_tokens_file

A = TOKENS["team-a"]


def table(**identities: dict[str, Any]) -> Any:
    return parse_identities({"identities": identities}, "test", ["default", "high"])


def test_tokens_and_their_digests_both_identify() -> None:
    t = table(a=entry(A), b=entry(TOKENS["team-b"], hashed=False))
    assert t.identify(A).name == "a" and t.identify(TOKENS["team-b"]).name == "b"
    assert t.identify("another-token-entirely") is None
    assert set(t.digests) == {token_digest(A), token_digest(TOKENS["team-b"])}  # no token kept


def test_grants_absent_empty_and_given() -> None:
    t = table(a=entry(A), b=entry(TOKENS["team-b"], dataset_prefixes=[], transform_modules=["x"],
                                  priority_classes=["high"], admin=True))
    a, b = t.identities["a"], t.identities["b"]
    assert (a.dataset_prefixes, a.transform_modules, a.priority_classes, a.admin) == (None, None, None, False)
    assert (b.dataset_prefixes, b.transform_modules, b.priority_classes, b.admin) == ((), ("x",), ("high",), True)


@pytest.mark.parametrize(("data", "error"), [
    ({"identity": {}}, "a mapping with one key, 'identities'"),
    ({"identities": {"bad name": entry(A)}}, "identity 'bad name': a name is"),
    ({"identities": {"unknown": entry(A)}}, "not 'unknown'"),
    ({"identities": {"a": {"token": [A]}}}, r"unknown key\(s\) \['token'\]"),
    ({"identities": {"a": {"dataset_prefixes": []}}}, "give its tokens as tokens_sha256"),
    ({"identities": {"a": {"tokens": ["short"]}}}, "at least 16 printable ASCII characters"),
    ({"identities": {"a": {"tokens": ["has a space in it!!"]}}}, "without spaces"),
    ({"identities": {"a": {"tokens_sha256": ["abc"]}}}, "64 hex digits"),
    ({"identities": {"a": entry(A), "b": entry(A, hashed=False)}}, "also belongs to identity 'a'"),
    ({"identities": {"a": entry(A, priority_classes=["gold"])}}, r"priority class\(es\) \['gold'\] are not"),
    ({"identities": {"a": entry(A, admin="yes")}}, "admin is true or false"),
    ({"identities": {"a": entry(A, dataset_prefixes="gs://x")}}, "dataset_prefixes is a list"),
])
def test_a_bad_file_is_refused_naming_the_entry_never_a_token(data: dict[str, Any], error: str) -> None:
    with pytest.raises(ValueError, match=error) as refused:
        parse_identities(data, "tokens.yaml", ["default"])
    assert str(refused.value).startswith("tokens.yaml: ")
    assert "short" not in str(refused.value) and A not in str(refused.value)


def test_yaml_or_json_and_a_yaml_error_shows_where_not_what() -> None:
    text = f"identities:\n  a:\n    tokens: [{A}]\n    admin: true\n"
    assert parse_text(text.encode(), "f").identities["a"].admin
    assert parse_text(b'{"identities": {"a": {"tokens": ["' + A.encode() + b'"]}}}', "f").identify(A)
    with pytest.raises(ValueError, match="neither JSON nor YAML at line 4, column 1") as broken:
        parse_text(f"identities:\n  a:\n    tokens: [{A}\n".encode(), "f")
    assert A not in str(broken.value)


@pytest.mark.parametrize(("metadata", "reason", "says"), [
    ([], "no_token", "this service wants a token"),
    ([("x-other", "Bearer " + A)], "no_token", "this service wants a token"),
    ([("authorization-bin", ("Bearer " + A).encode())], "no_token", "this service wants a token"),
    ([("authorization", "")], "malformed", "not 'Bearer <token>'"),
    ([("authorization", A)], "malformed", "not 'Bearer <token>'"),
    ([("authorization", "Basic " + A)], "malformed", "not 'Bearer <token>'"),
    ([("authorization", "Bearer ")], "malformed", "not 'Bearer <token>'"),
    ([("authorization", "Bearer " + A)] * 2, "malformed", "carries 2 authorization headers"),
    ([("authorization", "Bearer " + A + "x")], "unknown_token", "not one this service knows"),
    ([("authorization", "Bearer " + "y" * 7000)], "unknown_token", "not one this service knows"),
])
def test_a_call_without_one_known_bearer_token_is_refused(metadata: list[tuple[str, Any]], reason: str, says: str,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    refusals = Refusals("test")
    with caplog.at_level(logging.WARNING), pytest.raises(Unauthenticated, match=says) as refused:
        authenticate(table(a=entry(A)), metadata, "OpenJob", refusals, "ipv4:10.0.0.1:5")
    assert str(refused.value).startswith("OpenJob refused: ")
    assert refusals.totals() == {("unknown", reason): 1}
    assert A not in caplog.text and "y" * 50 not in caplog.text and "10.0.0.1" in caplog.text


@pytest.mark.parametrize("value", [f"Bearer {A}", f"bearer {A}", f"  BEARER   {A}  "])
def test_a_known_bearer_token_names_its_identity(value: str) -> None:
    refusals = Refusals("test")
    assert authenticate(table(a=entry(A)), [("x", "y"), ("authorization", value)], "M", refusals).name == "a"
    assert refusals.totals() == {}


def test_the_file_is_read_again_when_it_changes_and_kept_when_it_is_broken(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    write_tokens_file(path, {"a": entry(A)})
    watched = IdentityFile(str(path), ["default"])
    assert watched.refresh() is None  # unchanged
    write_tokens_file(path, {"a": entry(A), "b": entry(TOKENS["team-b"])})
    changed = watched.refresh()
    assert changed is not None and set(changed.identities) == {"a", "b"} and watched.table is changed
    assert watched.rejected is None
    path.write_text('{"identities": {"a": {"tok')  # caught half-written
    assert watched.refresh() is None and watched.table is changed
    assert watched.rejected is not None and "tokens file" in watched.rejected  # what a test can wait for
    os.remove(path)  # gone (a Secret being replaced)
    assert watched.refresh() is None and watched.table is changed
    write_tokens_file(path, {"b": entry(TOKENS["team-b"])})
    assert set(watched.refresh().identities) == {"b"}  # type: ignore[union-attr]
    assert watched.rejected is None


def test_a_file_that_does_not_load_stops_the_service_at_start(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"cannot read the tokens file .*missing\.json"):
        IdentityFile(str(tmp_path / "missing.json"))
    (tmp_path / "bad.json").write_text('{"identities": {"a": {}}}')
    with pytest.raises(ValueError, match="identity 'a': give its tokens"):
        IdentityFile(str(tmp_path / "bad.json"))


def test_the_setting_is_a_flag_an_environment_variable_and_a_config_field() -> None:
    assert ServiceConfig.load(environ={"SHARDSTREAM_AUTH_TOKENS_FILE": "/etc/tokens.yaml"}).auth_tokens_file == \
        "/etc/tokens.yaml"
    assert ServiceConfig().auth_tokens_file is None


# ---------------------------------------------------------------- what an identity may do


def spec(**fields: Any) -> JobOptions:
    return JobOptions(**{"dataset": ("gs://team-a/train",), "batch_size": 4, "shuffle": True, "seed": 0,
                      "drop_last": False, "world_size": 1, **fields})


def gate_for(tmp_path: Path, **grants: Any) -> tuple[Gate, Any]:
    path = tmp_path / "tokens.json"
    write_tokens_file(path, {"team-a": entry(A, **grants)})
    gate = Gate(IdentityFile(str(path), ["default", "high"]), Refusals("test"))
    return gate, gate.table.identities["team-a"]


def test_an_entry_without_grants_leaves_the_service_limits(tmp_path: Path) -> None:
    gate, a = gate_for(tmp_path)
    gate.check_open(a, spec(transform="anything:f", collate="other:g"), "high")
    assert gate.dataset_check(a) is None


def test_dataset_prefixes_at_a_path_boundary(tmp_path: Path) -> None:
    gate, a = gate_for(tmp_path, dataset_prefixes=["gs://team-a/train"])
    gate.check_open(a, spec(dataset=("gs://team-a/train/part-0.parquet", "gs://team-a/train")), "")
    for outside in ("gs://team-a/training/x.parquet", "gs://team-b/train", "gs://team-a/train/../secret"):
        with pytest.raises(DatasetNotAllowed, match=r"identity 'team-a' may not read .*: its dataset prefixes are "
                                                    r"gs://team-a/train"):
            gate.check_open(a, spec(dataset=(outside,)), "")
    assert gate.refusals.totals() == {("team-a", "dataset"): 3}


@pytest.mark.parametrize(("grants", "job", "error"), [
    ({"dataset_prefixes": []}, spec(), "its dataset prefixes are none"),
    ({"transform_modules": []}, spec(transform="acme:f"), "its transform modules are none"),
    ({"priority_classes": []}, spec(), "its priority classes are none"),
])
def test_an_empty_list_grants_nothing(tmp_path: Path, grants: dict[str, list[str]], job: JobOptions,
                                      error: str) -> None:
    gate, a = gate_for(tmp_path, **grants)
    with pytest.raises(PermissionDenied, match=error):
        gate.check_open(a, job, "")


def test_transform_and_collate_modules_and_priority_classes(tmp_path: Path) -> None:
    gate, a = gate_for(tmp_path, transform_modules=["acme.tf"], priority_classes=["default"])
    gate.check_open(a, spec(transform="acme.tf.vision:crop", collate="acme.tf:pad"), "")  # "" is default
    gate.check_open(a, spec(transform="image"), "default")  # built-ins are not modules
    with pytest.raises(TransformNotAllowed, match=r"identity 'team-a' may not use transform module 'acme\.tfx'"):
        gate.check_open(a, spec(transform="acme.tfx:crop"), "")
    with pytest.raises(TransformNotAllowed, match=r"may not use collate module 'lab': its transform modules are acme\.tf"):
        gate.check_open(a, spec(collate="lab:fn"), "")
    with pytest.raises(PermissionDenied, match="identity 'team-a' may not use priority class 'high': its priority "
                                               "classes are default"):
        gate.check_open(a, spec(), "high")


def test_status_shows_an_identity_its_own_jobs_and_an_admin_all() -> None:
    a, ops = table(a=entry(A), ops=entry(TOKENS["ops"], admin=True)).identities.values()
    assert Gate.sees(a, "a") and not Gate.sees(a, "b") and Gate.sees(ops, "b") and Gate.sees(None, "b")


# ---------------------------------------------------------------- the client's token


def test_the_token_comes_from_the_argument_then_the_environment() -> None:
    env = {"SHARDSTREAM_TOKEN": "from-env", "SHARDSTREAM_TOKEN_FILE": "/nope"}
    assert Token.resolve("given", environ=env) == Token(value="given")
    assert Token.resolve(token_file="/f", environ=env) == Token(file="/f")
    assert Token.resolve(environ=env) == Token(value="from-env")
    assert Token.resolve(environ={"SHARDSTREAM_TOKEN_FILE": "/f"}) == Token(file="/f")
    assert Token.resolve(environ={}) is None
    assert "secret-value" not in repr(Token(value="secret-value"))


def test_a_token_file_is_read_at_each_use(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text(A + "\n")
    token = Token(file=str(path))
    assert token.metadata() == (("authorization", f"Bearer {A}"),)
    path.write_text(TOKENS["team-b"])  # a rotated Secret
    assert token.metadata() == (("authorization", f"Bearer {TOKENS['team-b']}"),)


@pytest.mark.parametrize(("token", "error"), [
    (Token(value=""), "the token is empty"), (Token(value="tök-en"), "characters an authorization header cannot"),
    (Token(value="two words"), "printable ASCII without spaces"), (Token(file="/nonexistent/t"), "cannot read"),
])
def test_a_token_a_header_cannot_carry_is_refused_before_sending(token: Token, error: str) -> None:
    with pytest.raises(InvalidJobSpec, match=error) as refused:
        token.metadata()
    assert "tök" not in str(refused.value) and "two words" not in str(refused.value)
