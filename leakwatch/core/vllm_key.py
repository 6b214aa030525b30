"""The optional vLLM API key: vLLM's own --api-key check (Bearer, on /v1 and the other inference
routes; /health and /metrics stay open, see GUARDED_PREFIX in vllm/entrypoints/serve/middleware/
authenticate.py), the key read from a secret file.

Opt in natively by putting a key in the stack's secrets folder (`.stack/secrets/vllm-api-key`), or by
naming a file with $VLLM_API_KEY_FILE before `make up`. vLLM gets it through $VLLM_API_KEY set by
`python -m leakwatch.core.vllm_key FILE -- <vLLM arguments>` (never on a command line, where `ps` shows
it). Our clients (load generator, drill, benches) find it the same way.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from urllib.parse import urlparse

from .errors import LeakwatchError

KEY_FILE = "vllm-api-key"  # in the stack's secrets folder
KEY_FILE_ENV = "VLLM_API_KEY_FILE"
MIN_LENGTH = 16


def read(path: Path) -> str:
    try:
        key = Path(path).read_text().strip()
    except OSError as exc:
        raise LeakwatchError(f"cannot read the vLLM API key file {path}: {exc.strerror}") from None
    if len(key) < MIN_LENGTH or any(c.isspace() for c in key):
        raise LeakwatchError(f"the vLLM API key in {path} is too weak (need {MIN_LENGTH}+ characters, no spaces)")
    return key


def stack_key_file(secrets_dir: Path) -> Path | None:
    """The key file the native runner hands to vLLM, or None when the stack runs without a key."""
    explicit = os.environ.get(KEY_FILE_ENV, "").strip()
    if explicit:
        return Path(explicit)
    path = secrets_dir / KEY_FILE
    return path if path.exists() else None


def key_for(url: str | None) -> str | None:
    """The key to send to the vLLM at url: $VLLM_API_KEY_FILE's, or this native stack's own when url is its vLLM."""
    from .settings import load as load_settings
    from .state_layout import StateLayout
    from .topology import LOOPBACK_HOSTS

    explicit = os.environ.get(KEY_FILE_ENV, "").strip()
    if explicit:
        return read(Path(explicit))
    if not url:
        return None
    parsed = urlparse(url)
    settings = load_settings()
    if parsed.hostname not in (*LOOPBACK_HOSTS, settings.bind_address) or parsed.port != settings.service("vllm").port:
        return None
    path = StateLayout.current().secrets / KEY_FILE
    return read(path) if path.exists() else None


def headers_for(url: str | None) -> dict[str, str]:
    key = key_for(url)
    return {"Authorization": f"Bearer {key}"} if key else {}


def launch(argv: list[str]) -> None:
    """`python -m leakwatch.core.vllm_key KEY_FILE -- VLLM_ARGS...`: vLLM's API server with the key in its
    environment; exec keeps the PID, so supervisord and the exporter see vLLM itself."""
    if len(argv) < 2 or argv[1] != "--":
        raise SystemExit("usage: python -m leakwatch.core.vllm_key KEY_FILE -- VLLM_ARGS...")
    try:
        key = read(Path(argv[0]))
    except LeakwatchError as exc:
        raise SystemExit(f"leakwatch: {exc}") from None
    os.environ["VLLM_API_KEY"] = key
    os.execv(sys.executable, [sys.executable, "-m", "vllm.entrypoints.openai.api_server", *argv[2:]])


if __name__ == "__main__":
    launch(sys.argv[1:])
