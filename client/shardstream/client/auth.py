"""The token a client presents to a service that asks for one (the service's auth_tokens_file).

``RemoteLoader(..., token=...)`` or ``token_file=...``; left out, the token comes
from ``SHARDSTREAM_TOKEN``, else from the file ``SHARDSTREAM_TOKEN_FILE`` names.
A file is read at each call that needs it, so a mounted Kubernetes Secret that
is rotated under a running job is picked up without a restart. The token goes
as ``authorization: Bearer <token>`` metadata on every call, to the service's
port and to each decoder's: over plaintext anyone on the network path can read
it, so use it with TLS where that path is not trusted.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from shardstream.proto.errors import CredentialsError

ENV_TOKEN = "SHARDSTREAM_TOKEN"
ENV_TOKEN_FILE = "SHARDSTREAM_TOKEN_FILE"
Metadata = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Token:
    """A token given as it is, or the file that holds it (read when used)."""

    value: str | None = None
    file: str | None = None

    def __repr__(self) -> str:  # never shows the token
        return f"Token(file={self.file!r})" if self.file else "Token(<hidden>)"

    @classmethod
    def resolve(cls, token: str | None = None, token_file: str | None = None,
                environ: Mapping[str, str] | None = None) -> Token | None:
        """The token to send: `token`, else `token_file`, else SHARDSTREAM_TOKEN, else
        SHARDSTREAM_TOKEN_FILE; None when there is none (the service asks for none)."""
        environ = os.environ if environ is None else environ
        if token is not None or token_file is not None:
            return cls(value=token) if token is not None else cls(file=token_file)
        if environ.get(ENV_TOKEN):
            return cls(value=environ[ENV_TOKEN])
        if environ.get(ENV_TOKEN_FILE):
            return cls(file=environ[ENV_TOKEN_FILE])
        return None

    def read(self) -> str:
        """The token now (a file read again each time), checked for what a header can carry."""
        if self.file is not None:
            try:
                token = Path(self.file).read_text().strip()
            except (OSError, UnicodeDecodeError) as exc:
                raise CredentialsError(f"cannot read the token file {self.file!r}: "
                                       f"{getattr(exc, 'strerror', None) or exc}") from None
            where = f"the token file {self.file!r}"
        else:
            token, where = (self.value or "").strip(), "the token"
        if not token:
            raise CredentialsError(f"{where} is empty")
        if not all(33 <= ord(c) <= 126 for c in token):
            raise CredentialsError(f"{where} holds characters an authorization header cannot carry (printable "
                                   "ASCII without spaces only); the value is not shown")
        return token

    def metadata(self) -> Metadata:
        """The call metadata that carries it."""
        return (("authorization", f"Bearer {self.read()}"),)


def call_metadata(token: Token | None) -> Metadata | None:
    """What to pass as `metadata=` on a call: the token's, or None without one."""
    return token.metadata() if token is not None else None


__all__ = ["ENV_TOKEN", "ENV_TOKEN_FILE", "Token", "call_metadata"]
