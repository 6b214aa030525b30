"""The processes of the native stack: commands, environment and health endpoints."""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ..core import profiles as model_profiles, vllm_key, webauth
from ..core.errors import LeakwatchError
from ..core.paths import RULES_DIR
from ..core.settings import StackSettings
from ..core.state_layout import StateLayout
from ..core.topology import (
    CANARY_ROUTER_PROGRAM,
    CANARY_SERVICES,
    HEALER_PROGRAM,
    VLLM_CANARY_PROGRAM,
    VLLM_PROGRAM,
    native_target,
    native_url,
)

LIFECYCLE_ENV = "PROMETHEUS_ENABLE_LIFECYCLE"
ORPHAN_REAPER = "leakwatch.native.orphan_reaper"

# Debian package that provides each binary, for the error message when one is missing.
DEBIAN_BINARIES = {
    "prometheus": "prometheus",
    "prometheus-alertmanager": "prometheus-alertmanager",
    "prometheus-node-exporter": "prometheus-node-exporter",
    "haproxy": "haproxy",
}


@dataclass(frozen=True)
class Program:
    name: str  # supervisor program name and log file name
    service: str  # the service in config/stack.yaml: its port, and its health_path answers 200 when ready
    command: list[str]
    environment: dict[str, str] = field(default_factory=dict)
    stop_wait_s: int = 10
    ready_timeout_s: int = 60


def binary(name: str) -> str:
    # Debian puts haproxy in /usr/sbin, which a user's PATH may leave out.
    fallback = next((f"{d}/{name}" for d in ("/usr/bin", "/usr/sbin") if Path(f"{d}/{name}").exists()), None)
    path = shutil.which(name) or fallback
    if not path:
        raise LeakwatchError(
            f"{name} is not installed; `make up` installs it (Debian package {DEBIAN_BINARIES[name]!r}), "
            f"or run: apt-get install {DEBIAN_BINARIES[name]}"
        )
    return path


def model_path(profile: model_profiles.Profile, layout: StateLayout) -> Path:
    if profile.source != "demo":
        raise LeakwatchError(f"profile {profile.name!r} has no local model for the native runner")
    return layout.models / "demo"


def vllm_program(
    settings: StackSettings,
    profile: model_profiles.Profile,
    layout: StateLayout,
    extra_args: list[str] | None = None,
    extra_env: dict[str, str] | None = None,
    service: str = "vllm",
    name: str = VLLM_PROGRAM,
) -> Program:
    """service/name: the canary side is the same vLLM on its own port (vllm_canary, vllm-canary)."""
    port = settings.service(service).port
    # vLLM's own graceful drain on SIGTERM; supervisor waits a little longer before SIGKILL.
    shutdown_timeout = int(settings.service("vllm").shutdown_timeout_s)
    # An optional API key (leakwatch/core/vllm_key.py): handed over in vLLM's environment, never on its command line.
    key_file = vllm_key.stack_key_file(layout.secrets)
    if key_file:
        vllm_key.read(key_file)  # a missing or weak key is a clear error now, not a FATAL vLLM later
    launcher = (
        ["-m", "leakwatch.core.vllm_key", str(key_file), "--"]
        if key_file
        else ["-m", "vllm.entrypoints.openai.api_server"]
    )
    command = [
        # No process of vLLM outlives its API server (an orphaned EngineCore keeps its memory): orphan_reaper.py.
        *(sys.executable, "-m", ORPHAN_REAPER, "--"),
        sys.executable,
        *launcher,
        *model_profiles.vllm_engine_args(profile, str(model_path(profile, layout))),
        "--host",
        settings.bind_address,
        "--port",
        str(port),
        "--shutdown-timeout",
        str(shutdown_timeout),
        *(extra_args or []),
    ]
    return Program(
        name=name,
        service=service,
        command=command,
        environment={**model_profiles.vllm_environment(profile), **(extra_env or {})},
        stop_wait_s=shutdown_timeout + 15,
        ready_timeout_s=600,
    )


def stack_programs(
    settings: StackSettings,
    profile: model_profiles.Profile,
    layout: StateLayout,
    vllm_extra_args: list[str] | None = None,
    vllm_extra_env: dict[str, str] | None = None,
    canary: bool = False,
    canary_vllm_extra_args: list[str] | None = None,
    canary_vllm_extra_env: dict[str, str] | None = None,
) -> list[Program]:
    """canary: a second vLLM of the profile (with its own extra args/env: the candidate build or
    setting), its exporter, and the router sending each request to one side (docs/canary.md)."""
    programs = core_programs(settings, profile, layout, vllm_extra_args, vllm_extra_env)
    if canary:
        programs += canary_programs(settings, profile, layout, canary_vllm_extra_args, canary_vllm_extra_env)
    return programs


def canary_programs(
    settings: StackSettings,
    profile: model_profiles.Profile,
    layout: StateLayout,
    extra_args: list[str] | None = None,
    extra_env: dict[str, str] | None = None,
) -> list[Program]:
    vllm_service, exporter_service = CANARY_SERVICES["vllm"], CANARY_SERVICES["leakwatch"]
    return [
        vllm_program(settings, profile, layout, extra_args, extra_env, vllm_service, VLLM_CANARY_PROGRAM),
        exporter_program(settings, layout, vllm_service, exporter_service, "leakwatch-exporter-canary", profile),
        Program(
            name=CANARY_ROUTER_PROGRAM,
            service="canary_router",
            # -db: stay in the foreground under supervisord; the config is written by the runner.
            command=[binary("haproxy"), "-db", "-f", str(layout.router_config)],
        ),
    ]


def core_programs(
    settings: StackSettings,
    profile: model_profiles.Profile,
    layout: StateLayout,
    vllm_extra_args: list[str] | None = None,
    vllm_extra_env: dict[str, str] | None = None,
) -> list[Program]:
    bind = settings.bind_address
    svc = settings.service
    retention = settings.prometheus["retention"]
    return [
        Program(
            name="prometheus",
            service="prometheus",
            command=[
                binary("prometheus"),
                f"--config.file={layout.conf / 'prometheus.yml'}",
                f"--storage.tsdb.path={layout.data / 'prometheus'}",
                f"--storage.tsdb.retention.time={retention}",
                f"--web.listen-address={bind}:{svc('prometheus').port}",
                # Basic auth (bcrypt) on every endpoint: leakwatch/core/webauth.py, docs/healer.md.
                f"--web.config.file={layout.secrets / webauth.WEB_CONFIG_FILE}",
                # /-/quit and /-/reload (and the admin API) stay off: anyone who reaches the port could stop
                # alerting. Opt in with PROMETHEUS_ENABLE_LIFECYCLE=1 (docs/healer.md).
                *(["--web.enable-lifecycle"] if os.environ.get(LIFECYCLE_ENV) == "1" else []),
            ],
        ),
        Program(
            name="alertmanager",
            service="alertmanager",
            command=[
                binary("prometheus-alertmanager"),
                f"--config.file={layout.conf / 'alertmanager.yml'}",
                f"--storage.path={layout.alertmanager_data}",
                f"--web.listen-address={bind}:{svc('alertmanager').port}",
                # Without it, anyone on the port could post a remediate="true" alert or silence everything.
                f"--web.config.file={layout.secrets / webauth.WEB_CONFIG_FILE}",
                # One instance: no gossip listener on 0.0.0.0.
                "--cluster.listen-address=",
            ],
        ),
        Program(
            name="node-exporter",
            service="node_exporter",
            command=[
                binary("prometheus-node-exporter"),
                f"--web.listen-address={bind}:{svc('node_exporter').port}",
            ],
        ),
        vllm_program(settings, profile, layout, vllm_extra_args, vllm_extra_env),
        exporter_program(settings, layout, profile=profile),
        healer_program(settings, layout),
    ]


def healer_program(settings: StackSettings, layout: StateLayout) -> Program:
    """`leakwatch heal`: restarts this stack's vLLM through supervisord when Alertmanager sends a
    remediation alert; its token file is the one Alertmanager's webhook reads (0600, secrets/ 0700)."""
    exporter = native_target(settings, "leakwatch_exporter")
    return Program(
        name=HEALER_PROGRAM,
        service="healer",
        command=[
            sys.executable,
            "-m",
            "leakwatch",
            "heal",
            "--listen",
            settings.bind_address,
            "--port",
            str(settings.service("healer").port),
            "--token-file",
            str(layout.healer_token),
            "--supervisor-socket",
            str(layout.supervisor_socket),
            "--vllm-url",
            native_url(settings, "vllm"),
            "--state-file",
            str(layout.data / "healer" / "state.json"),
            # Alerts about another exporter (another host's, a forged one) never restart this stack's vLLM.
            "--target",
            f"{exporter['job']}={exporter['instance']}",
        ],
    )


def exporter_program(
    settings: StackSettings,
    layout: StateLayout,
    vllm_service: str = "vllm",
    service: str = "leakwatch_exporter",
    name: str = "leakwatch-exporter",
    profile: model_profiles.Profile | None = None,
) -> Program:
    """`leakwatch exporter` watching one of this stack's vLLMs (it is healthy before vLLM is: vLLM's
    state is one of its metrics); with the profile vLLM runs, for the memory breakdown."""
    return Program(
        name=name,
        service=service,
        command=[
            sys.executable,
            "-m",
            "leakwatch",
            "exporter",
            "--vllm-url",
            native_url(settings, vllm_service),
            "--listen-address",
            settings.bind_address,
            "--port",
            str(settings.service(service).port),
            "--state-file",
            str(layout.data / f"{name}.json"),
            *(["--profile", profile.name] if profile is not None else []),
        ],
    )


def rules_glob() -> str:
    return str(RULES_DIR / "*.yml")
