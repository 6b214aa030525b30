"""Bad input to `make up` / `leakwatch stack` gets a clear error naming the problem, and starts nothing;
the expected failures of down, status and logs too (issue 35): one line, never a traceback."""

from __future__ import annotations

import os
import socket
import subprocess

import pytest

from leakwatch.core import profiles
from leakwatch.core.paths import REPO_ROOT
from tests.support.native_stack import VENV_BIN, short_state_dir, stack_port_env


def leakwatch(*args, env=None, timeout=120):
    return subprocess.run(
        [str(VENV_BIN / "leakwatch"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        cwd=REPO_ROOT,
    )


@pytest.fixture
def isolated_env():
    state = short_state_dir("lw-err-")
    return {**stack_port_env(), "LEAKWATCH_STATE_DIR": str(state)}


def test_unknown_model_lists_valid_profiles(isolated_env):
    result = leakwatch("stack", "up", "--model", "no-such-model", "--runner", "native", env=isolated_env)
    assert result.returncode == 2
    assert "unknown model profile 'no-such-model'" in result.stderr
    for name in profiles.available():
        assert name in result.stderr
    assert not os.path.exists(os.path.join(isolated_env["LEAKWATCH_STATE_DIR"], "supervisord.pid"))


def test_unknown_model_through_make(isolated_env):
    result = subprocess.run(
        ["make", "--no-print-directory", "up", "MODEL=nope", "STACK=native"],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=REPO_ROOT,
        env={**os.environ, **isolated_env},
    )
    assert result.returncode != 0
    assert "unknown model profile 'nope'" in result.stderr


def test_port_in_use_names_port_and_owner(isolated_env):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        env = {**isolated_env, "PROMETHEUS_PORT": str(port)}
        result = leakwatch("stack", "up", "--runner", "native", env=env)
    assert result.returncode == 2
    assert f"port {port} for prometheus is already in use" in result.stderr
    assert f"pid {os.getpid()}" in result.stderr, "the owner of the port should be named"
    assert "PROMETHEUS_PORT" in result.stderr
    assert not os.path.exists(os.path.join(isolated_env["LEAKWATCH_STATE_DIR"], "supervisord.pid"))


@pytest.mark.parametrize("value, message", [("abc", "is not a port number"), ("70000", "outside 1-65535")])
def test_bad_port_value(isolated_env, value, message):
    result = leakwatch("stack", "up", "--runner", "native", env={**isolated_env, "VLLM_PORT": value})
    assert result.returncode == 2
    assert f"VLLM_PORT={value!r}" in result.stderr or f"VLLM_PORT={value}" in result.stderr
    assert message in result.stderr


def test_unknown_runner(isolated_env):
    result = leakwatch("stack", "up", "--runner", "kubernetes", env=isolated_env)
    assert result.returncode == 2 and "STACK='kubernetes' is not one of" in result.stderr


def test_compose_without_docker_engine(isolated_env):
    from leakwatch.stack.compose_runner import engine_problem

    if engine_problem() is None:
        pytest.skip("a Docker engine is reachable here; this test is about machines without one")
    result = leakwatch("stack", "up", "--runner", "compose", env={**isolated_env, "GRAFANA_ADMIN_PASSWORD": "x"})
    assert result.returncode == 2
    assert "STACK=compose needs a running Docker engine" in result.stderr
    assert "STACK=native" in result.stderr


def test_compose_without_grafana_password(isolated_env):
    result = leakwatch("stack", "up", "--runner", "compose", env={**isolated_env, "GRAFANA_ADMIN_PASSWORD": ""})
    assert result.returncode == 2
    assert "GRAFANA_ADMIN_PASSWORD is not set" in result.stderr and ".env.example" in result.stderr


def test_bad_bind_address(isolated_env):
    result = leakwatch("stack", "up", "--runner", "native", env={**isolated_env, "BIND_ADDRESS": "everywhere"})
    assert result.returncode == 2 and "BIND_ADDRESS='everywhere' is not an IP address" in result.stderr


NO_ENGINE = "unix:///nonexistent/leakwatch-test-docker.sock"


def assert_one_clear_line(result: subprocess.CompletedProcess, *needles: str) -> None:
    out = result.stdout + result.stderr
    assert result.returncode != 0 and "Traceback" not in out, out
    assert any("error:" in line for line in result.stderr.splitlines()), out
    for needle in needles:
        assert needle in out, (needle, out)


@pytest.mark.parametrize(
    "args, env, needles",
    [
        (["stack", "down", "--runner", "compose"], {"DOCKER_HOST": NO_ENGINE}, ["no Docker engine to ask"]),
        (["stack", "status", "--runner", "compose"], {"DOCKER_HOST": NO_ENGINE}, ["no Docker engine to ask"]),
        (["stack", "logs", "--no-follow", "--runner", "compose"], {"DOCKER_HOST": NO_ENGINE}, ["no Docker engine"]),
        (
            ["stack", "up", "--runner", "compose"],
            {"DOCKER_HOST": NO_ENGINE, "IMAGES": "local"},
            ["needs a running Docker engine", "STACK=native"],
        ),
        (["stack", "up", "--runner", "compose"], {"IMAGES": "bogus"}, ["IMAGES='bogus' is not one of"]),
    ],
    ids=["down-no-engine", "status-no-engine", "logs-no-engine", "up-no-engine", "bad-images"],
)
def test_compose_commands_fail_with_one_clear_line(isolated_env, args, env, needles):
    assert_one_clear_line(leakwatch(*args, env={**isolated_env, **env}), *needles)


@pytest.mark.parametrize("target", ["down", "status"])
def test_make_targets_on_a_compose_stack_without_an_engine(isolated_env, target):
    result = subprocess.run(
        ["make", "--no-print-directory", target, "STACK=compose"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO_ROOT,
        env={**os.environ, **isolated_env, "DOCKER_HOST": NO_ENGINE},
    )
    assert_one_clear_line(result, "no Docker engine to ask")


def test_the_healers_port_in_use_is_named_not_a_traceback(isolated_env, tmp_path):
    token = tmp_path / "token"
    token.write_text("t" * 40)
    token.chmod(0o600)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = leakwatch("heal", "--port", str(port), "--token-file", str(token), env=isolated_env)
    assert_one_clear_line(result, f"cannot listen on 127.0.0.1:{port}")
