"""Tokens files for the identity tests, written as a rotated Kubernetes Secret is: a new file put in
place at once (os.replace), never edited in place."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from shardstream.service.identities import token_digest

# The identities the tests use and one token each (tokens are >= 16 printable characters).
TOKENS = {"team-a": "team-a-token-0123456789", "team-b": "team-b-token-9876543210", "ops": "ops-admin-token-abcdef"}


def bearer(token: str) -> tuple[tuple[str, str]]:
    return (("authorization", f"Bearer {token}"),)


def write_tokens_file(path: Path, identities: dict[str, dict[str, Any]]) -> None:
    """`identities` as a tokens file at `path`, replacing what was there in one step."""
    staged = path.with_name(f".{path.name}.new")
    staged.write_text(json.dumps({"identities": identities}, indent=2))
    os.replace(staged, path)


def entry(token: str, hashed: bool = True, **grants: Any) -> dict[str, Any]:
    """One identity's entry: its token as a sha256 digest (or as itself), and its grants."""
    return {("tokens_sha256" if hashed else "tokens"): [token_digest(token) if hashed else token], **grants}


__all__ = ["TOKENS", "bearer", "entry", "write_tokens_file"]
