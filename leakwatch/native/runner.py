"""up / down / status / logs for the native stack."""

from __future__ import annotations

import base64
import fcntl
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
import xmlrpc.client
from contextlib import contextmanager
from pathlib import Path

import psutil

from ..canary.router import RouterAdmin, default_split, haproxy_config
from ..core import ports, profiles as model_profiles, webauth, yamlfmt
from ..core.errors import LeakwatchError
from ..core.settings import StackSettings, load as load_settings
from ..core.state_layout import StateLayout
from ..core.topology import (
    CANARY_ROUTER_PROGRAM,
    DEPLOYMENTS,
    LOOPBACK_ADDRESS,
    native_address,
    native_jobs,
    native_url,
    reachable_host,
)
from ..demo_model import command as demo_model
from ..generate.alertmanager_config import native_alertmanager_config
from ..generate.prometheus_config import prometheus_config
from ..heal import token as heal_token
from ..heal.alertmanager import localize
from . import supervisor
from .orphan_reaper import terminate_then_kill
from .programs import Program, rules_glob, stack_programs

FATAL_STATES = {"FATAL", "EXITED", "STOPPED", "UNKNOWN"}


class NativeStack:
    def __init__(self, layout: StateLayout | None = None, settings: StackSettings | None = None):
        self.layout = layout or StateLayout.current()
        self.settings = settings or load_settings()

    # -- state -----------------------------------------------------------------------------------

    def supervisord_pid(self) -> int | None:
        try:
            pid = int(self.layout.supervisord_pid.read_text().strip())
        except (OSError, ValueError):
            return None
        try:
            proc = psutil.Process(pid)
            if "supervisord" in " ".join(proc.cmdline()):
                return pid
        except psutil.Error:
            pass
        return None

    def is_running(self) -> bool:
        return self.supervisord_pid() is not None

    def info(self) -> dict:
        try:
            return json.loads(self.layout.stack_info.read_text())
        except (OSError, ValueError):
            return {}

    def rpc(self):
        return supervisor.client(self.layout.supervisor_socket).supervisor

    def processes(self) -> list[psutil.Process]:
        """Every live process of this stack, found by the marker in its environment."""
        marker = f"{supervisor.STACK_MARKER_ENV}={self.layout.root}".encode()
        found = []
        for proc in psutil.process_iter():
            try:
                with open(f"/proc/{proc.pid}/environ", "rb") as fh:
                    if marker in fh.read().split(b"\0"):
                        found.append(proc)
            except OSError:
                continue
        return found

    @contextmanager
    def _lock(self):
        self.layout.root.mkdir(parents=True, exist_ok=True)
        with open(self.layout.root / ".lock", "w") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise LeakwatchError(
                    f"another leakwatch command is starting or stopping the stack in {self.layout.root}"
                ) from None
            yield

    # -- up ----------------------------------------------------------------------------------------

    def programs(
        self,
        profile,
        vllm_extra_args=None,
        vllm_extra_env=None,
        canary=False,
        canary_vllm_extra_args=None,
        canary_vllm_extra_env=None,
    ) -> list[Program]:
        return stack_programs(
            self.settings,
            profile,
            self.layout,
            vllm_extra_args,
            vllm_extra_env,
            canary,
            canary_vllm_extra_args,
            canary_vllm_extra_env,
        )

    def up(
        self,
        model: str = model_profiles.DEFAULT_PROFILE,
        *,
        vllm_extra_args: list[str] | None = None,
        vllm_extra_env: dict[str, str] | None = None,
        rules_dir: Path | None = None,
        alertmanager_config: dict | None = None,
        canary: bool = False,
        canary_vllm_extra_args: list[str] | None = None,
        canary_vllm_extra_env: dict[str, str] | None = None,
        out=sys.stdout,
    ) -> dict:
        """rules_dir replaces prometheus/rules/ and alertmanager_config alertmanager/alertmanager.yml
        for this stack only (the drill runs its time-scaled copies this way). canary: a second vLLM
        of the profile (with canary_vllm_extra_args/env) and its exporter behind the weighted router
        (docs/canary.md)."""
        profile = model_profiles.load(model)
        if profile.needs_gpu:
            raise LeakwatchError(
                f"profile {profile.name!r} needs {profile.gpu_count}x {profile.hardware.get('gpu')} GPUs; the native "
                f"runner serves with vLLM's CPU backend. Run it on a GPU host with Docker: "
                f"make up MODEL={profile.name} STACK=compose"
            )
        with self._lock():
            if self.is_running():
                running = self.info().get("model")
                if running != profile.name:
                    raise LeakwatchError(
                        f"the native stack is already running with model {running!r}; run `make down` first"
                    )
                if bool(self.info().get("canary")) != canary:
                    have = "with" if self.info().get("canary") else "without"
                    raise LeakwatchError(
                        f"the native stack is already running {have} the canary; run `make down` first"
                    )
                programs = self.programs(profile, vllm_extra_args, vllm_extra_env, canary)
                print(f"native stack already running (model {running}); checking health", file=out)
                self._wait_healthy(programs)
                self._print_urls(profile, out)
                return self.info()

            leftovers = self.processes()
            if leftovers:
                raise LeakwatchError(
                    f"processes of an earlier stack in {self.layout.root} are still running "
                    f"(pids {', '.join(str(p.pid) for p in leftovers)}); run `make down` first"
                )
            programs = self.programs(
                profile, vllm_extra_args, vllm_extra_env, canary, canary_vllm_extra_args, canary_vllm_extra_env
            )
            for prog in programs:
                svc = self.settings.service(prog.service)
                ports.require_free(self.settings.bind_address, svc.port, prog.name, svc.port_env)

            self.layout.make_dirs()
            if profile.source == "demo":
                print("preparing the offline demo model ...", file=out)
                demo_model.build(self.layout.models / "demo")
            self._render_configs(programs, rules_dir, alertmanager_config, canary)
            info = {
                "runner": "native",
                "model": profile.name,
                "served_model_name": profile.served_name,
                "bind_address": self.settings.bind_address,
                "ports": {p.service: self.settings.service(p.service).port for p in programs},
                "canary": canary,
                "started_at": time.time(),
            }
            self.layout.stack_info.write_text(json.dumps(info, indent=1))
            print(f"starting supervisord ({self.layout.supervisord_conf})", file=out)
            supervisord = Path(sys.executable).with_name("supervisord")
            subprocess.run([str(supervisord), "-c", str(self.layout.supervisord_conf)], check=True)
            try:
                self._wait_healthy(programs)
                if canary:
                    self._wait_router_sides()
            except LeakwatchError:
                print("start-up failed; stopping what was started", file=out)
                self._stop()
                raise
            self._print_urls(profile, out)
            return info

    def _render_configs(
        self,
        programs: list[Program],
        rules_dir: Path | None = None,
        alertmanager_config: dict | None = None,
        canary: bool = False,
    ) -> None:
        settings = self.settings
        password_file, _ = webauth.ensure(self.layout.secrets)  # Prometheus's and Alertmanager's basic auth
        prom = prometheus_config(
            settings,
            native_jobs(settings, self.layout.targets, canary),
            alertmanager_targets=[native_address(settings, "alertmanager")],
            rule_files=[str(Path(rules_dir) / "*.yml") if rules_dir else rules_glob()],
            basic_auth=webauth.basic_auth_config(str(password_file)),
        )
        header = "GENERATED by `leakwatch stack up` for this native stack; rewritten on every start."
        (self.layout.conf / "prometheus.yml").write_text(yamlfmt.dump(prom, header))
        heal_token.ensure_file(self.layout.healer_token)  # shared by Alertmanager and the healer
        healer_url = native_url(settings, "healer")
        if alertmanager_config is None:
            am = native_alertmanager_config(settings, str(self.layout.healer_token))
        else:
            # The remediation webhook goes to this stack's healer with this stack's token file.
            am = localize(alertmanager_config, healer_url, str(self.layout.healer_token))
        (self.layout.conf / "alertmanager.yml").write_text(yamlfmt.dump(am, header))
        if canary:
            self.layout.router_config.write_text(self._router_config(header))
        base_env = {"PYTHONUNBUFFERED": "1"}
        self.layout.supervisord_conf.write_text(supervisor.render_conf(self.layout, programs, base_env))

    def _router_config(self, header: str) -> str:
        sides = dict(zip(DEPLOYMENTS, ("vllm", "vllm_canary"), strict=True))
        return haproxy_config(
            self.settings.bind_address,
            self.settings.service("canary_router").port,
            {side: native_url(self.settings, svc) for side, svc in sides.items()},
            default_split(self.settings),
            self.layout.router_socket,
            header,
        )

    def _wait_router_sides(self, timeout_s: float = 60) -> None:
        """Healthy vLLMs are not yet the router's: its own checks (every 2 s) must see both up,
        or the first requests all go to whichever side it found first."""
        states = RouterAdmin(self.layout.router_socket).wait_sides_up(timeout_s)
        if states is not None:
            raise LeakwatchError(
                f"the canary router does not see both sides up after {timeout_s:g}s ({states}); last lines of "
                f"{self.layout.log(CANARY_ROUTER_PROGRAM)}:\n" + self.tail(CANARY_ROUTER_PROGRAM, 25)
            )

    def _health_url(self, prog: Program) -> str:
        host = reachable_host(self.settings.bind_address)
        service = self.settings.service(prog.service)
        return f"http://{host}:{service.port}{service.ready_path}"

    def healthy(self, prog: Program) -> bool:
        url = self._health_url(prog)
        request = urllib.request.Request(url)
        auth = webauth.auth_for(url) if prog.service in ("prometheus", "alertmanager") else None
        if auth:
            token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
            request.add_header("Authorization", f"Basic {token}")
        try:
            with urllib.request.urlopen(request, timeout=5) as resp:
                return resp.status == 200
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def _wait_healthy(self, programs: list[Program]) -> None:
        pending = {p.name: p for p in programs}
        started = time.monotonic()
        while pending:
            states = self._states()
            for name, prog in list(pending.items()):
                state = states.get(name, {}).get("statename")
                if state in FATAL_STATES:
                    raise LeakwatchError(
                        f"{name} failed to start ({state}); last lines of {self.layout.log(name)}:\n"
                        + self.tail(name, 25)
                    )
                if state == "RUNNING" and self.healthy(prog):
                    del pending[name]
                elif time.monotonic() - started > prog.ready_timeout_s:
                    raise LeakwatchError(
                        f"{name} not healthy after {prog.ready_timeout_s}s ({self._health_url(prog)}); last lines of "
                        f"{self.layout.log(name)}:\n" + self.tail(name, 25)
                    )
            if pending:
                time.sleep(1)

    def _states(self) -> dict[str, dict]:
        try:
            return {p["name"]: p for p in self.rpc().getAllProcessInfo()}
        except (OSError, xmlrpc.client.Error):
            return {}

    def tail(self, program: str, lines: int) -> str:
        try:
            return "".join(self.layout.log(program).read_text(errors="replace").splitlines(True)[-lines:])
        except OSError:
            return "(no log yet)"

    def urls(self) -> dict[str, str]:
        info = self.info()
        host = reachable_host(info.get("bind_address", LOOPBACK_ADDRESS))
        p = info.get("ports", {})
        return {
            "vllm": f"http://{host}:{p.get('vllm')}",
            "prometheus": f"http://{host}:{p.get('prometheus')}",
            "alertmanager": f"http://{host}:{p.get('alertmanager')}",
            "node_exporter": f"http://{host}:{p.get('node_exporter')}/metrics",
            "healer": f"http://{host}:{p.get('healer')}",
            "leakwatch_exporter": f"http://{host}:{p.get('leakwatch_exporter')}/metrics",
            **(
                {
                    "canary_router": f"http://{host}:{p.get('canary_router')}",
                    "vllm_canary": f"http://{host}:{p.get('vllm_canary')}",
                    "leakwatch_exporter_canary": f"http://{host}:{p.get('leakwatch_exporter_canary')}/metrics",
                }
                if info.get("canary")
                else {}
            ),
        }

    def _print_urls(self, profile, out) -> None:
        u = self.urls()
        canary = ""
        if "canary_router" in u:
            canary = (
                f"  canary router     {u['canary_router']}/v1  (stable {u['vllm']}, canary {u['vllm_canary']}; "
                f"split: leakwatch canary-router show --admin-socket {self.layout.router_socket})\n"
                f"  canary exporter   {u['leakwatch_exporter_canary']}\n"
            )
        print(
            f"\nleakwatch native stack is up (model profile {profile.name}, served as {profile.served_name!r}):\n"
            f"  vLLM OpenAI API   {u['vllm']}/v1\n"
            f"  Prometheus        {u['prometheus']}  (alerts: {u['prometheus']}/alerts)\n"
            f"  Alertmanager      {u['alertmanager']}\n"
            f"                    both ask for user {webauth.USER!r}, password in "
            f"{self.layout.secrets / webauth.PASSWORD_FILE}\n"
            f"  node exporter     {u['node_exporter']}\n"
            f"  healer            {u['healer']}/alerts  (token: {self.layout.healer_token})\n"
            f"  memory exporter   {u['leakwatch_exporter']}\n"
            f"{canary}"
            f"  Grafana           not run natively (no Grafana package here); use STACK=compose on a Docker host,\n"
            f"                    or import grafana/dashboards/*.json into your Grafana\n"
            f"  logs              {self.layout.logs}  (make logs)\n"
            f"  stop              make down\n",
            file=out,
        )

    # -- down --------------------------------------------------------------------------------------

    def down(self, out=sys.stdout) -> list[int]:
        with self._lock():
            return self._stop(out)

    def _stop(self, out=sys.stdout) -> list[int]:
        """Stops supervisord and its programs; returns pids that had to be killed afterwards."""
        pid = self.supervisord_pid()
        if pid is not None:
            try:
                self.rpc().shutdown()
            except (OSError, xmlrpc.client.Error):
                os.kill(pid, 15)
            try:
                psutil.Process(pid).wait(timeout=120)
            except psutil.TimeoutExpired:
                os.kill(pid, 9)
            except psutil.NoSuchProcess:
                pass
        leftovers = self.processes()
        terminate_then_kill(leftovers, grace_s=10)
        self.layout.supervisor_socket.unlink(missing_ok=True)
        if pid is None and not leftovers:
            print("native stack is not running", file=out)
        else:
            print("native stack stopped", file=out)
        if leftovers:
            print(f"killed leftover processes: {[p.pid for p in leftovers]}", file=out)
        return [p.pid for p in leftovers]

    # -- status / logs -----------------------------------------------------------------------------

    def status(self, out=sys.stdout) -> bool:
        """Prints each program's state and health; True when everything is running and healthy."""
        if not self.is_running():
            print(f"native stack is not running ({self.layout.root})", file=out)
            return False
        info = self.info()
        profile = model_profiles.load(info["model"])
        ok = True
        states = self._states()
        print(f"native stack, model profile {info['model']} ({self.layout.root})", file=out)
        for prog in self.programs(profile, canary=bool(info.get("canary"))):
            st = states.get(prog.name, {})
            healthy = st.get("statename") == "RUNNING" and self.healthy(prog)
            ok &= healthy
            print(
                f"  {prog.name:<14} {st.get('statename', 'MISSING'):<9} {'healthy' if healthy else 'UNHEALTHY':<9} "
                f"{st.get('description', '')}  {self._health_url(prog)}",
                file=out,
            )
        return ok

    def logs(self, program: str | None = None, follow: bool = True, lines: int = 50) -> int:
        files = [self.layout.log(program)] if program else sorted(self.layout.logs.glob("*.log"))
        if not files or not all(f.exists() for f in files):
            raise LeakwatchError(f"no logs in {self.layout.logs}; is the stack started (`make up`)?")
        cmd = ["tail", "-n", str(lines), *(["-F"] if follow else []), *map(str, files)]
        return subprocess.call(cmd)
