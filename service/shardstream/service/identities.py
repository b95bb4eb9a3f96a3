"""Identities: whom a token belongs to, and what that identity may do (`auth_tokens_file`).

With `auth_tokens_file` set, every call on the service's port (OpenJob,
GetStatus; not the gRPC health service, which kubelet probes) and on every
decode actor's batch server (FetchBatches) must carry ``authorization: Bearer
<token>`` metadata naming a token of the file; anything else is refused with
UNAUTHENTICATED. Without it, nobody is asked (the service as before).

The file (YAML, or JSON, which is YAML too)::

    identities:
      team-a:
        tokens_sha256: ["<sha256 hex of a token>"]  # the file then reveals no token
        tokens: ["<a token>"]                        # or the tokens themselves (a Secret)
        dataset_prefixes: ["gs://team-a/"]           # absent: the service's allowed_dataset_prefixes
        transform_modules: ["team_a.transforms"]     # absent: the service's allowed_transform_modules
        priority_classes: ["default", "high"]        # absent: any of the service's classes
        admin: false                                 # true: GetStatus lists every identity's jobs

An identity's lists narrow the service's, never widen them: a dataset must
lie under one of the service's prefixes (when it has any) and one of the
identity's, a user transform or collate module under both lists' prefixes.
An empty list grants nothing. Only sha256 digests of tokens are kept in
memory and shipped to the decode actors. The file is read again when it
changes (IdentityFile); one that does not load keeps the previous table.

Pure standard library (and PyYAML, where the service runs): the settings that
ship a table import this module, and a training-side install imports them.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import threading
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from shardstream.proto.errors import ShardstreamError, Unauthenticated

log = logging.getLogger(__name__)

AUTHORIZATION_KEY = "authorization"
SCHEME = "bearer"  # compared without case (RFC 7235)
UNKNOWN = "unknown"  # the identity of a caller without a known token, in metrics and logs
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,62}$")
DIGEST = re.compile(r"^[0-9a-f]{64}$")
MIN_TOKEN_CHARS = 16
ENTRY_KEYS = {"tokens", "tokens_sha256", "dataset_prefixes", "transform_modules", "priority_classes", "admin"}
HOW_TO_SEND = ("send 'authorization: Bearer <token>' metadata (RemoteLoader(token=...), SHARDSTREAM_TOKEN or "
               "SHARDSTREAM_TOKEN_FILE; shardstream status --token-file)")

E = TypeVar("E", bound=ShardstreamError)


def token_digest(token: str) -> str:
    """The sha256 hex digest of a token: what the tokens file may hold instead of the token."""
    return hashlib.sha256(token.encode()).hexdigest()


def valid_token(token: str) -> bool:
    """Printable ASCII without spaces: what an `authorization` header can carry."""
    return bool(token) and all(33 <= ord(c) <= 126 for c in token)


@dataclass(frozen=True)
class Identity:
    """One entry of the tokens file: a name, and what it may do beyond the service's own limits."""

    name: str
    dataset_prefixes: tuple[str, ...] | None = None  # None: the service's allowed_dataset_prefixes alone
    transform_modules: tuple[str, ...] | None = None  # None: the service's allowed_transform_modules alone
    priority_classes: tuple[str, ...] | None = None  # None: any of the service's priority classes
    admin: bool = False  # GetStatus lists every identity's jobs, not only its own


@dataclass(frozen=True)
class IdentityTable:
    """The tokens file as the service holds it: identities, and the sha256 of each token -> its name."""

    identities: dict[str, Identity] = field(default_factory=dict)
    digests: dict[str, str] = field(default_factory=dict)

    def identify(self, token: str) -> Identity | None:
        """The identity `token` belongs to, or None."""
        name = self.digests.get(token_digest(token))
        return self.identities.get(name) if name is not None else None


def parse_identities(data: Any, source: str, priority_classes: Collection[str] | None = None) -> IdentityTable:
    """The table of a parsed tokens file; a ValueError naming `source` and the entry at fault.
    `priority_classes`: the service's, which an identity's must be among."""
    if not isinstance(data, dict) or set(data) != {"identities"} or not isinstance(data["identities"], dict):
        raise ValueError(f"{source}: a tokens file is a mapping with one key, 'identities', mapping each "
                         "identity's name to its entry")
    identities: dict[str, Identity] = {}
    digests: dict[str, str] = {}
    for name, entry in data["identities"].items():
        where = f"{source}: identity {name!r}"
        if not isinstance(name, str) or not NAME.match(name) or name == UNKNOWN:
            raise ValueError(f"{where}: a name is 1-63 letters, digits and . _ @ - (starting with a letter or "
                             f"digit), and not {UNKNOWN!r}")
        if not isinstance(entry, dict):
            raise ValueError(f"{where}: its entry must be a mapping")
        unknown = sorted(set(entry) - ENTRY_KEYS)
        if unknown:
            raise ValueError(f"{where}: unknown key(s) {unknown}; an entry has {sorted(ENTRY_KEYS)}")
        if "tokens" not in entry and "tokens_sha256" not in entry:
            raise ValueError(f"{where}: give its tokens as tokens_sha256 (sha256 hex digests) or tokens")
        own = [_digest_of(d, where) for d in _strings(entry, "tokens_sha256", where)]
        for token in _strings(entry, "tokens", where):
            if not valid_token(token) or len(token) < MIN_TOKEN_CHARS:
                raise ValueError(f"{where}: each of its tokens must be at least {MIN_TOKEN_CHARS} printable ASCII "
                                 "characters without spaces (the value is not shown)")
            own.append(token_digest(token))
        for digest in own:
            if digests.get(digest, name) != name:
                raise ValueError(f"{where}: a token of it also belongs to identity {digests[digest]!r}")
            digests[digest] = name
        classes = _optional_strings(entry, "priority_classes", where)
        if classes is not None and priority_classes is not None:
            missing = sorted(set(classes) - set(priority_classes))
            if missing:
                raise ValueError(f"{where}: priority class(es) {missing} are not the service's "
                                 f"({', '.join(sorted(priority_classes))}; its priority_classes setting)")
        admin = entry.get("admin", False)
        if not isinstance(admin, bool):
            raise ValueError(f"{where}: admin is true or false")
        identities[name] = Identity(name, _optional_strings(entry, "dataset_prefixes", where),
                                    _optional_strings(entry, "transform_modules", where), classes, admin)
    return IdentityTable(identities, digests)


def parse_text(text: bytes, source: str, priority_classes: Collection[str] | None = None) -> IdentityTable:
    """A tokens file's bytes (YAML, or JSON) as a table."""
    try:
        data = json.loads(text)
    except ValueError:
        try:
            import yaml
        except ModuleNotFoundError:  # a training-side install: JSON only
            raise ValueError(f"{source}: not JSON, and PyYAML is not installed to read YAML") from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:  # where, not its text: the line may hold a token
            mark = getattr(exc, "problem_mark", None)
            at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
            raise ValueError(f"{source}: neither JSON nor YAML{at}: {getattr(exc, 'problem', None) or 'does not parse'}") from None
    return parse_identities(data, source, priority_classes)


def _strings(entry: dict[str, Any], key: str, where: str) -> list[str]:
    value = entry.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ValueError(f"{where}: {key} is a list of non-empty strings")
    return value


def _optional_strings(entry: dict[str, Any], key: str, where: str) -> tuple[str, ...] | None:
    return tuple(_strings(entry, key, where)) if key in entry else None


def _digest_of(value: str, where: str) -> str:
    digest = value.strip().lower()
    if not DIGEST.match(digest):
        raise ValueError(f"{where}: each of tokens_sha256 is a sha256 hex digest (64 hex digits), e.g. "
                         "printf %s \"$TOKEN\" | sha256sum")
    return digest


class IdentityFile:
    """The tokens file, and the table it held when last read. `refresh()` reads it again when it
    changed (its inode, size or modification time: a Kubernetes Secret's mounted file is replaced
    by a new one); a file that does not load then (caught half-written, gone) keeps the previous
    table, with a warning, until a later look finds it whole."""

    def __init__(self, path: str, priority_classes: Collection[str] | None = None) -> None:
        self.path = path
        self.source = f"tokens file {path!r} (auth_tokens_file)"
        self._priority_classes = priority_classes
        self._signature = self._stat()
        self._contents = self._read()
        self.table = parse_text(self._contents, self.source, priority_classes)  # at start: a ValueError
        self._rejected: bytes | str | None = None  # what was last warned about, to warn once

    @property
    def rejected(self) -> str | None:
        """Why the file, as last read, was not loaded (the previous table kept); None once it loads."""
        return None if self._rejected is None else str(self._rejected)

    def _stat(self) -> tuple[int, int, int]:
        try:
            st = os.stat(self.path)
        except OSError as exc:
            raise ValueError(f"cannot read the {self.source}: {exc.strerror or exc}") from None
        return st.st_ino, st.st_size, st.st_mtime_ns

    def _read(self) -> bytes:
        try:
            with open(self.path, "rb") as f:
                return f.read()
        except OSError as exc:
            raise ValueError(f"cannot read the {self.source}: {exc.strerror or exc}") from None

    def refresh(self) -> IdentityTable | None:
        """The new table when the file changed and loads, else None (keep the current one)."""
        try:
            signature = self._stat()
            if signature == self._signature:
                return None
            contents = self._read()
            if contents == self._contents:
                self._signature = signature
                return None
            table = parse_text(contents, self.source, self._priority_classes)
        except ValueError as exc:
            if str(exc) != self._rejected:
                log.warning("%s; keeping the identities loaded before", exc)
                self._rejected = str(exc)
            return None
        self._signature, self._contents, self.table, self._rejected = signature, contents, table, None
        log.info("%s changed: %d identities, %d tokens", self.source, len(table.identities), len(table.digests))
        return table


class Refusals:
    """Refusals by the tokens file, counted by (identity, reason) and logged, never with a token.

    Reasons: `no_token`, `malformed` (not one 'Bearer <token>'), `unknown_token`, and a known
    identity's `dataset`, `transform`, `priority` or `job` (another identity's job)."""

    def __init__(self, where: str) -> None:
        self.where = where  # "service" or "decoder", for the log
        self._counts: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

    def refuse(self, cls: type[E], identity: str, reason: str, message: str, peer: str = "",
               detail: str = "") -> E:
        """The error to raise, counted and logged (`detail`: for the log only)."""
        with self._lock:
            self._counts[(identity, reason)] += 1
        log.warning("%s refused %s (identity %s, %s): %s%s", self.where, peer or "a call", identity, reason,
                    message, f" [{detail}]" if detail else "")
        return cls(message)

    def add(self, counts: Mapping[tuple[str, str], int]) -> None:
        with self._lock:
            self._counts.update(counts)

    def take(self) -> dict[tuple[str, str], int]:
        """The counts since the last call (a decode actor's report)."""
        with self._lock:
            counts, self._counts = dict(self._counts), Counter()
        return counts

    def totals(self) -> dict[tuple[str, str], int]:
        with self._lock:
            return dict(self._counts)


def authenticate(table: IdentityTable, metadata: Sequence[tuple[str, str | bytes]] | None, what: str,
                 refusals: Refusals, peer: str = "") -> Identity:
    """The identity of a call's `authorization: Bearer <token>` metadata; else an Unauthenticated
    error, counted in `refusals`, naming `what` was refused and why (never the token)."""
    values = [v for k, v in metadata or () if k == AUTHORIZATION_KEY]

    def refuse(reason: str, why: str, detail: str = "") -> Unauthenticated:
        return refusals.refuse(Unauthenticated, UNKNOWN, reason, f"{what} refused: {why}", peer, detail)

    if not values:
        raise refuse("no_token", f"this service wants a token: {HOW_TO_SEND}")
    if len(values) > 1:
        raise refuse("malformed", f"the call carries {len(values)} authorization headers: send one")
    value = values[0]
    scheme, token = [*(value.decode("latin-1") if isinstance(value, bytes) else value).split(None, 1), "", ""][:2]
    token = token.strip()
    if scheme.lower() != SCHEME or not token:
        raise refuse("malformed", f"its authorization header is not 'Bearer <token>': {HOW_TO_SEND}")
    identity = table.identify(token)
    if identity is None:
        raise refuse("unknown_token", "its token is not one this service knows (not in its auth_tokens_file: "
                     "mistyped, or rotated out?)", f"token sha256 {token_digest(token)[:8]}...")
    return identity


__all__ = ["AUTHORIZATION_KEY", "UNKNOWN", "Identity", "IdentityFile", "IdentityTable", "Refusals", "authenticate",
           "parse_identities", "parse_text", "token_digest", "valid_token"]
