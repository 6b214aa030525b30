"""The converted folder: built in a hidden sibling, renamed into place when complete, and verified
against its manifest (every file's size and sha256, and the source it came from) before reuse.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import tempfile
from pathlib import Path

from ..core.errors import LeakwatchError
from .checkpoint import sha256_file

MANIFEST = "leakwatch-conversion.json"
FORMAT = 1


def write_manifest(folder: Path, source: dict, files: dict[str, str], extra: dict) -> None:
    """files: name -> sha256 of every file in the folder except the manifest itself."""
    entries = {
        name: {"bytes": (folder / name).stat().st_size, "sha256": digest} for name, digest in sorted(files.items())
    }
    body = {"format": FORMAT, "converter": "leakwatch convert-xglm", "source": source, **extra, "files": entries}
    (folder / MANIFEST).write_text(json.dumps(body, indent=1) + "\n")


def read_manifest(folder: Path) -> dict | None:
    try:
        body = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return (
        body
        if isinstance(body, dict) and body.get("format") == FORMAT and isinstance(body.get("files"), dict)
        else None
    )


def problem(folder: Path, full: bool = True) -> str | None:
    """Why folder is not a complete, intact conversion; None when it is."""
    manifest = read_manifest(folder)
    if manifest is None:
        return f"it has no readable {MANIFEST} (an interrupted or foreign conversion)"
    for name, entry in manifest["files"].items():
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        if path.stat().st_size != entry.get("bytes"):
            return f"{name} has {path.stat().st_size} bytes, the manifest says {entry.get('bytes')}"
        if full and sha256_file(path) != entry.get("sha256"):
            return f"{name} does not match its sha256 in the manifest"
    return None


def same_source(recorded: dict, wanted: dict) -> bool:
    keys = ("repo", "revision") if "repo" in wanted else ("path", "weights")
    return all(recorded.get(k) == wanted.get(k) for k in keys)


@contextlib.contextmanager
def locked(dst: Path):
    """One converter per destination at a time (compose may start it twice if a user retries)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    with open(dst.parent / f".{dst.name}.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise LeakwatchError(f"another conversion into {dst} is running (lock {lock.name})") from None
        yield


def clear_leftovers(dst: Path) -> None:
    """Removes work folders of interrupted runs; only called while holding the lock."""
    for stale in dst.parent.glob(f".{dst.name}.partial-*"):
        shutil.rmtree(stale, ignore_errors=True)
    for stale in dst.parent.glob(f".{dst.name}.old-*"):
        shutil.rmtree(stale, ignore_errors=True)


def work_folder(dst: Path) -> Path:
    work = Path(tempfile.mkdtemp(prefix=f".{dst.name}.partial-", dir=dst.parent))
    work.chmod(0o755)  # mkdtemp's 0700 would hide the model from a server running as another user
    return work


def publish(work: Path, dst: Path) -> None:
    """Renames the finished work folder to dst (atomic on one filesystem), replacing an old dst."""
    os.sync()  # the data is on disk before the folder looks complete
    if dst.exists():
        old = dst.parent / f".{dst.name}.old-{os.getpid()}"
        dst.rename(old)
        work.rename(dst)
        shutil.rmtree(old, ignore_errors=True)
    else:
        work.rename(dst)


def check_free_space(folder: Path, needed: int) -> None:
    free = shutil.disk_usage(folder).free
    if free < needed * 1.02:
        raise LeakwatchError(
            f"{folder} has {free / 1e9:.1f} GB free; the converted checkpoint needs {needed / 1e9:.1f} GB"
        )
