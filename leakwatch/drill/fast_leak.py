"""The fast-leak drill (`leakwatch drill --fast-leak`): a leak from the first request after the
exporter's baseline, fast enough to exhaust vLLM's memory cgroup within the hour, no control phase.

1. start the drill's private stack (leak injector, rules rendered at the variant's compression);
2. put vLLM into a memory cgroup (usage + headroom) and send production-day traffic to
   /v1/completions, which keeps `bytes_per_request` per request;
3. wait for HostMemoryRunningOut (critical, remediate="true") and the healer's drain and restart,
   watching the cgroup's OOM-kill count;
4. pass when the restart came before any OOM kill, memory is back near its level before the leak,
   and Alertmanager's repeats did not restart vLLM again. The lead is how long the headroom left
   at the restart would have lasted at the leak's pace, in production minutes.
"""

from __future__ import annotations

import time

from ..core import alert_config
from ..rules.profile_values import warmup_after_ready_s
from .load import CpuHog, load_average
from .orchestrator import Drill, DrillResult
from .private_stack import pss_total

FAST_LEAK_ALERT = "HostMemoryRunningOut"


class FastLeakDrill(Drill):
    alert = FAST_LEAK_ALERT

    def earliest_s(self) -> float:
        """Wall seconds after the exporter's baseline before the rule may fire: its window plus the
        profiles' warm-up after ready plus its `for` (production durations over the compression)."""
        host = alert_config.load().section("host")
        production = host.seconds("runout_window") + warmup_after_ready_s() + host.seconds("runout_for")
        return self.cfg.wall(production)

    def run(self) -> DrillResult:
        cfg, res = self.cfg, self.result
        cgroup = None
        hog = CpuHog(self.cpu_hogs, max_s=cfg.wall(cfg.leak_span_s) + 1800).start()
        try:
            self._start_stack()
            baseline_at = self.prom.scalar("max(leakwatch_baseline_timestamp_seconds)") or time.time()
            res.baseline_bytes = self.api_memory()
            cgroup, pids = self._limit_vllm()
            limit = cgroup.limit()
            # What the exporter and the rule count against the limit: vLLM's proportional memory (the
            # cgroup charges only what its processes allocate after they moved in).
            used_at_start = pss_total(pids)
            self.say(
                f"fast leak: {cfg.bytes_per_request} B per /v1/completions request at {cfg.requests_per_day:g} "
                f"requests a day from the first, {cfg.cgroup_headroom_bytes / 2**20:.0f} MiB of headroom"
            )
            leak_start, proc, deadline = self._start_leaking("locust-fast-leak")

            def oom_killed() -> str | None:
                if cgroup.oom_kills():
                    return "the kernel's OOM killer ended a vLLM process before the healer's restart"
                return None

            def headroom_left(restart_at: float) -> None:
                used = pss_total(pids)
                res.headroom_left_bytes = limit - used
                pace = (used - used_at_start) / max(restart_at - leak_start, 1e-9)  # bytes per wall second
                if pace > 0:
                    res.lead_min = res.headroom_left_bytes / pace * cfg.time_compression / 60
                self.say(
                    f"{res.headroom_left_bytes / 2**20:.0f} MiB of headroom left at the restart "
                    f"({res.lead_min or 0:.0f} production minutes at the leak's pace)"
                )

            alert_at, remediation_at, restart_at = self._watch(leak_start, deadline, oom_killed, headroom_left)
            proc.terminate()
            proc.wait(timeout=60)
            res.alert_s = None if alert_at is None else alert_at - leak_start
            if remediation_at is not None and remediation_at - baseline_at < self.earliest_s():
                res.failures.append(
                    f"{self.alert} fired {remediation_at - baseline_at:.0f}s after the exporter's baseline, sooner "
                    f"than its window, warm-up and `for` allow ({self.earliest_s():.0f}s): its start-up guard is broken"
                )
            if restart_at is None:
                if not res.failures:
                    res.failures.append(f"no restart within {deadline - leak_start:.0f}s of the leak starting")
            else:
                self._recover(alert_at or restart_at, remediation_at, old_pids=pids)
            res.oom_kills = cgroup.oom_kills()
            if res.oom_kills and not any("OOM" in f for f in res.failures):
                res.failures.append(f"the kernel's OOM killer ended {res.oom_kills} vLLM process(es)")
            res.load_average.append(load_average())
        finally:
            self._stop_stack(cgroup, hog)
        return res
