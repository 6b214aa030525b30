"""leakwatch/native/orphan_reaper.py on real processes: what a command leaves behind when it dies is
stopped, its exit status is passed on, and a stop signalled to the process group (supervisord's
stopasgroup) reaches the command once. tests/stack/test_fault_drills.py kills vLLM's API server
with -9 under the real runner."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from leakwatch.native import orphan_reaper
from leakwatch.native.programs import ORPHAN_REAPER

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_CHILD_SUBREAPER is Linux's"),
]


def reaper(script: str, tmp_path, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", ORPHAN_REAPER, "--", sys.executable, "-c", textwrap.dedent(script)],
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


def wait_for_file(path, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().endswith("\n"):
            return path.read_text().strip()
        time.sleep(0.05)
    raise AssertionError(f"{path} not written within {timeout}s")


# A command that starts a child which outlives it (as EngineCore outlives a killed API server).
LEAVES_A_CHILD = """
    import os, subprocess, sys
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    open("child.pid", "w").write(f"{child.pid}\\n")
    os.{exit}
"""


@pytest.mark.parametrize(("exit_call", "status"), [("_exit(3)", 3), ("kill(os.getpid(), 9)", 128 + 9)])
def test_what_the_command_leaves_behind_is_stopped_and_its_status_passed_on(tmp_path, exit_call, status):
    proc = reaper(LEAVES_A_CHILD.replace("{exit}", exit_call), tmp_path)
    child = int(wait_for_file(tmp_path / "child.pid"))
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == status, stderr
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE
    assert f"stopped the 1 process(es) it left behind: [{child}]" in stderr


def test_a_child_that_ignores_sigterm_is_killed_after_the_grace_period(tmp_path, monkeypatch):
    script = """
        import os, subprocess, sys
        code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); open('ready', 'w').write('1\\\\n'); time.sleep(300)"
        child = subprocess.Popen([sys.executable, "-c", code])
        open("child.pid", "w").write(f"{child.pid}\\n")
        while not os.path.exists("ready"):
            pass
        os._exit(0)
    """
    proc = reaper(script, tmp_path)
    child = int(wait_for_file(tmp_path / "child.pid"))
    began = time.monotonic()
    proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert time.monotonic() - began >= orphan_reaper.GRACE_S - 1  # SIGTERM ignored, then SIGKILL
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE


def test_a_group_stop_reaches_the_command_once_and_the_launcher_waits_for_it(tmp_path):
    """supervisord's stop: SIGTERM to the whole process group. The command counts its SIGTERMs and
    takes a moment to drain, as vLLM's API server does; the launcher must not add a second one."""
    script = """
        import signal, time
        got = []
        signal.signal(signal.SIGTERM, lambda *_: got.append(1))
        open("ready", "w").write("1\\n")
        while not got:
            time.sleep(0.05)
        time.sleep(1.0)  # the drain
        open("sigterms", "w").write(f"{len(got)}\\n")
        raise SystemExit(0)
    """
    proc = reaper(script, tmp_path, start_new_session=True)  # its own group, as under supervisord
    wait_for_file(tmp_path / "ready")
    os.killpg(proc.pid, signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert wait_for_file(tmp_path / "sigterms") == "1"


def test_usage_and_a_missing_command_are_clear_errors(tmp_path):
    usage = subprocess.run([sys.executable, "-m", ORPHAN_REAPER], capture_output=True, text=True, timeout=60)
    assert usage.returncode == 2 and "usage:" in usage.stderr
    missing = subprocess.run(
        [sys.executable, "-m", ORPHAN_REAPER, "--", str(tmp_path / "no-such-binary")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 127 and "cannot run" in missing.stderr


def test_the_launcher_does_not_look_like_the_command(tmp_path):
    """`ps`-style searches for vLLM's API server (cmdline contains vllm.entrypoints) find the API
    server, not also the launcher that runs it."""
    proc = reaper("import time; open('ready', 'w').write('1\\n'); time.sleep(30)", tmp_path, start_new_session=True)
    try:
        wait_for_file(tmp_path / "ready")
        launcher = " ".join(psutil.Process(proc.pid).cmdline())
        assert launcher.startswith(orphan_reaper.TITLE) and "time.sleep" not in launcher, launcher
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.communicate(timeout=60)
