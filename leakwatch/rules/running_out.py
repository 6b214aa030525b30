"""The fast-leak alerts, HostMemoryRunningOut and GPUMemoryRunningOut: a memory runs out within a
horizon at its fall over a short window, while vLLM's own memory is what grows. The host's
available memory and a GPU's free memory differ only in the series a Memory names, so one builder
writes both pairs (the host and GPU groups each add theirs), and the detection bench picks them out
by RUNNING_OUT_ALERTS."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.alert_config import number
from .alert_rule import SIDE, Alert
from .profile_values import warmup_after_ready_s
from .promql import fill
from .recording import Context

# The fast-leak alerts (time to exhaustion over a short window, from minutes after a start).
RUNNING_OUT_ALERTS = ("HostMemoryRunningOut", "GPUMemoryRunningOut")


@dataclass(frozen=True)
class Memory:
    """A memory the fast-leak rules forecast: what is still free, how fast it falls, and vLLM's own."""

    section: str  # config/alerts.yaml section with the runout_* keys
    alert: str
    fall_rate: str  # recorded: the free memory's fall in most slices, bytes/s
    vllm_rate: str  # recorded: vLLM's own memory's growth in most slices, bytes/s
    free: str  # what is still free, bytes
    falls: str  # the free memory's fall as deriv() over a whole window, with {window} to fill
    vllm: str  # vLLM's own memory (recorded), for its whole-window deriv()
    on: str  # how the free memory joins vLLM's series


def running_out_alerts(ctx: Context, m: Memory) -> list[Alert]:
    """The fast-leak pair of a memory (the host's available memory, a GPU's free memory): at its
    fall over the short runout window it is gone within a horizon, while vLLM's own memory grows
    by at least a share of that fall (not a neighbour's growth). Judged from the exporter's baseline
    plus the profiles' warm-up after ready, so it works minutes after a start or a healer restart."""
    sec = ctx.thresholds.section(m.section)
    window = sec.dur("runout_window")
    guard = ctx.started_within(sec.seconds("runout_window") + warmup_after_ready_s() * ctx.thresholds.time_scale)
    vllm_grows = (
        f"({m.vllm_rate} > {number(sec.bytes_per_second('runout_min_growth_rate'))})\n"
        f"  and {m.vllm_rate} >= {m.on} group_left () ({number(sec.num('runout_min_vllm_share'))} * {m.fall_rate})"
    )

    def forecast(runout: str, grows: str, within: float) -> str:
        # The time to exhaustion takes vLLM's labels (instance, job: whom the healer restarts).
        return f"{runout}\n  + {m.on} group_right () (0 * (\n  {grows}\n))\n< {number(within)}\nunless {ctx.on_side()} {guard}"

    # Hysteresis: an allocator's staircase moves the slopes of 2-minute slices by half, so once
    # firing the alert holds while vLLM's memory still grows over the whole window and the free
    # memory is gone within twice the horizon at the whole window's fall.
    whole_runout = f"({m.free}) / ({m.falls.format(window=window)} > 0)"
    whole_grows = f"deriv({m.vllm}[{window}]) > 0"
    where = {
        "host": "The memory vLLM can still take on {{ $labels.instance }}"
        + SIDE
        + " (available memory and free swap, or "
        "the container's headroom)",
        "gpu": "GPU {{ $labels.gpu }}'s free memory on {{ $labels.instance }}" + SIDE,
    }[m.section]
    alerts = []
    for severity, key in (("warning", "runout_warning_within"), ("critical", "runout_critical_within")):
        alerts.append(
            Alert(
                m.alert,
                severity,
                forecast(f"({m.free}) / ({m.fall_rate} > 0)", vllm_grows, sec.seconds(key)),
                sec.dur("runout_for"),
                {"host": "The host's available memory", "gpu": "A GPU's memory"}[m.section]
                + " runs out soon, and vLLM's own memory is what grows.",
                fill(
                    f"{where} is gone in {{{{ $value | humanizeDuration }}}} at its fall over the last <window>, and "
                    "vLLM's processes grow by at least <share> of that fall. A leak this fast exhausts the memory "
                    "before the slower leak rules have a settled window."
                    + (
                        " The healer drains and restarts vLLM before the out-of-memory kill."
                        if severity == "critical"
                        else ""
                    ),
                    window=window,
                    share=f"{sec.num('runout_min_vllm_share'):.0%}",
                ),
                remediate=severity == "critical",
                keep_firing_while=forecast(whole_runout, whole_grows, 2 * sec.seconds(key)),
            )
        )
    return alerts
