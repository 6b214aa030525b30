"""The shared bearer token between Alertmanager and the healer: loaded, checked, created."""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from ..core.errors import LeakwatchError

TOKEN_ENV = "LEAKWATCH_HEALER_TOKEN"
MIN_LENGTH = 24
HOW_TO_MAKE = "python3 -c 'import secrets; print(secrets.token_urlsafe(32))'"


def _check(token: str, where: str) -> str:
    token = token.strip()
    if not token:
        raise LeakwatchError(f"the healer token in {where} is empty; create one with: {HOW_TO_MAKE}")
    if len(token) < MIN_LENGTH or any(c.isspace() for c in token):
        raise LeakwatchError(
            f"the healer token in {where} is too weak ({len(token)} characters, need {MIN_LENGTH} "
            f"without spaces); create one with: {HOW_TO_MAKE}"
        )
    return token


def load(token_file: str | None) -> str:
    """The token from --token-file, else $LEAKWATCH_HEALER_TOKEN; the healer refuses to start without one."""
    if token_file:
        path = Path(token_file)
        try:
            mode = path.stat().st_mode
            text = path.read_text()
        except OSError as exc:
            raise LeakwatchError(f"cannot read the healer token file {path}: {exc.strerror}") from None
        if mode & stat.S_IWOTH:
            raise LeakwatchError(f"the healer token file {path} is writable by everyone; chmod o-w it")
        return _check(text, str(path))
    if os.environ.get(TOKEN_ENV, "").strip():
        return _check(os.environ[TOKEN_ENV], f"${TOKEN_ENV}")
    raise LeakwatchError(
        f"no healer token: set {TOKEN_ENV} or pass --token-file (the same token Alertmanager's "
        f"webhook sends as credentials_file); create one with: {HOW_TO_MAKE}"
    )


def ensure_file(path: Path, mode: int = 0o600) -> Path:
    """Creates a random token at `path` (parent folder 0700) unless a valid one is there already."""
    path.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    if path.exists():
        _check(path.read_text(), str(path))
    else:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_urlsafe(32) + "\n")
    os.chmod(path, mode)
    return path
