"""vLLM's process tree as the tests find it, independently of the exporter's discovery: the API
server by its command line, the processes below it by the titles vLLM gives them (setproctitle
rewrites their command lines to `VLLM::EngineCore`, `VLLM::Worker_TP0`, ...)."""

from __future__ import annotations

import psutil

API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
TITLES = {"engine_core": "VLLM::EngineCore", "worker": "VLLM::Worker"}


def command_line(proc: psutil.Process) -> str:
    try:
        return " ".join(proc.cmdline())
    except psutil.Error:  # it just exited
        return ""


def is_api_server(proc: psutil.Process) -> bool:
    return API_SERVER_MODULE in command_line(proc)


def by_role(api_server: psutil.Process) -> dict[str, list[psutil.Process]]:
    """api_server, engine_core, worker and other: every process of the tree below api_server."""
    roles: dict[str, list[psutil.Process]] = {"api_server": [api_server], "engine_core": [], "worker": [], "other": []}
    for proc in api_server.children(recursive=True):
        title = command_line(proc)
        role = next((r for r, prefix in TITLES.items() if title.startswith(prefix)), "other")
        roles[role].append(proc)
    return roles
