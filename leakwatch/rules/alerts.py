"""Alerting rules: every rule the reference articles document (corrected) plus leak detection that
works under vLLM, and serving health.

Leak rules share one shape, because vLLM's memory is flat after warm-up and a one-time step (the
first long request, a new batch shape) must not page:
  * the growth rate is a low quantile of deriv() over the window's slices (a step lies in one);
  * normalised per request served in the window, or above the post-warm-up baseline;
  * windows that reach back to a vLLM (re)start and its warm-up are skipped;
  * a critical twin forecasts exhaustion at the current growth and is labelled for remediation.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..core import profiles as model_profiles
from ..core.alert_config import number
from ..core.durations import format_duration
from ..core.topology import DEPLOYMENT_LABEL
from ..heal import healer_settings
from .promql import by, fill, on
from .recording import Context

# The line between an alert's own condition and the one that keeps it firing (the backtester
# splits expressions there to replay the hysteresis; Prometheus reads it as a comment).
KEEP_FIRING_MARKER = "# leakwatch: keeps firing while"

# The fast-leak alerts (time to exhaustion over a short window, from minutes after a start).
RUNNING_OUT_ALERTS = ("HostMemoryRunningOut", "GPUMemoryRunningOut")

# vLLM's default --gpu-memory-utilization, used when no GPU profile sets one.
VLLM_DEFAULT_GPU_MEMORY_UTILIZATION = 0.9


@dataclass(frozen=True)
class Alert:
    name: str
    severity: str
    expr: str
    for_: str
    summary: str
    description: str
    remediate: bool = False
    # Hysteresis: once firing, the alert stays firing while this (looser) expression holds, so a
    # leak that keeps leaking does not flap when its rate dips under a threshold between an
    # allocator's segments or at night. keep_firing_for does not exist in Debian's Prometheus 2.42,
    # so the expression reads the alert's own ALERTS series (written at each evaluation).
    keep_firing_while: str | None = None

    def rule(self, runbook_url: str) -> dict:
        labels = {"severity": self.severity}
        if self.remediate:
            # The label the healer acts on (config/healer.yaml), so rules and healer cannot drift.
            policy = healer_settings.load()
            labels[policy.label_name] = policy.label_value
        expr = self.expr
        if self.keep_firing_while:
            own = f'ALERTS{{alertname="{self.name}", alertstate="firing", severity="{self.severity}"}}'
            expr = (
                f"{expr}\n{KEEP_FIRING_MARKER}\nor (\n{self.keep_firing_while}\n)"
                f" and ignoring (alertname, alertstate, {', '.join(labels)}) {own}"
            )
        return {
            "alert": self.name,
            "expr": expr,
            "for": self.for_,
            "labels": labels,
            "annotations": {
                "summary": self.summary,
                "description": self.description,
                "runbook_url": f"{runbook_url}#{self.name.lower()}",
            },
        }


def profile_shares() -> list[float]:
    """The gpu_memory_utilization of each GPU profile (vLLM's default where one sets none), sorted."""
    shares = set()
    for name in model_profiles.available():
        profile = model_profiles.load(name)
        if profile.needs_gpu:
            shares.add(float(profile.vllm.get("gpu_memory_utilization") or VLLM_DEFAULT_GPU_MEMORY_UTILIZATION))
    return sorted(shares) or [VLLM_DEFAULT_GPU_MEMORY_UTILIZATION]


def preallocated_share() -> float:
    """The highest gpu_memory_utilization among the GPU profiles (the share vLLM takes at start)."""
    return max(profile_shares())


def warmup_after_ready_s() -> float:
    """The longest monitoring.warmup_after_ready among the profiles: how long after the exporter's
    post-warm-up baseline the fast-leak rules still ignore growth (rules serve every profile)."""
    return max(model_profiles.load(name).warmup_after_ready_s for name in model_profiles.available())


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


def _running_out(ctx: Context, m: Memory) -> list[Alert]:
    """The fast-leak pair of a memory (the host's available memory, a GPU's free memory): at its
    fall over the short runout window it is gone within a horizon, while vLLM's own memory grows
    by at least a share of that fall (not a neighbour's growth). Judged from the exporter's baseline
    plus the profiles' warm-up after ready, so it works minutes after a start or a healer restart."""
    sec = ctx.t.section(m.section)
    window = sec.dur("runout_window")
    guard = ctx.started_within(sec.seconds("runout_window") + warmup_after_ready_s() * ctx.t.time_scale)
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


def utilization_label(share: float) -> str:
    """gpu_memory_utilization as vLLM's vllm:cache_config_info label writes it (Python's str())."""
    return str(float(share))


def _growing(rate_series: str, min_rate: float) -> str:
    return f"({rate_series} > {number(min_rate)})"


def _still_leaking(
    ctx: Context, sec, value: str, low_growths: list[str], released: str, restarted: str, per_host: bool = False
) -> str:
    """Hysteresis for a firing leak alert: its figure (`value`, so the notification still says what
    the alert measures) while the lows still rise over any of the given windows, the memory gave
    nothing back, and vLLM was not restarted (`restarted` per side, or per host for a card's)."""
    rising = "\n  or ".join(f"{name} > 0" for name in low_growths)
    return (
        f"({value})\nand (\n  {rising}\n)\nunless ({released} > {number(sec.size('release_min'))})\n"
        f"unless {ctx.on_host() if per_host else ctx.on_side()} {restarted}"
    )


def _net_growth(sec, low_growth: str, released: str | None = None, on: str = "") -> str:
    """The lows rose across the window, and (for windows shorter than a release period) the memory
    gave nothing back lately: a sawtooth of creep and release is not a leak."""
    text = f"and {on}({low_growth} > {number(sec.size('lows_min_growth'))})\n"
    if released:
        text += f"unless {on}({released} > {number(sec.size('release_min'))})\n"
    return text


CARD = "GPU {{ $labels.gpu }} ({{ $labels.modelName }}) on {{ $labels.Hostname }}"
# The canary's side, where the series carry one (docs/canary.md); nothing without a canary.
SIDE = f"{{{{ with $labels.{DEPLOYMENT_LABEL} }}}} ({{{{ . }}}} deployment){{{{ end }}}}"
ROLE = "vLLM {{ $labels.role }}{{ with $labels.rank }} rank {{ . }}{{ end }} on {{ $labels.instance }}" + SIDE


def gpu_alerts(ctx: Context) -> list[Alert]:
    g = ctx.t.section("gpu")
    util = preallocated_share()
    alerts = []

    # Each vLLM's own gpu_memory_utilization sets the threshold: vLLM reports it as a label of
    # vllm:cache_config_info, and each profile's value gets a branch; a vLLM reporting another
    # value (or none) is judged by the highest profile's.
    shares = profile_shares()
    ctx.vllm("vllm:cache_config_info")
    for severity, key in (("warning", "level_warning_headroom_share"), ("critical", "level_critical_headroom_share")):

        def level(u, key=key):
            return number(round(u + g.num(key) * (1 - u), 4))

        branches = [
            f"({ctx.gpu_used} / {ctx.gpu_total} > {level(u)}\n"
            f"  and {ctx.on_host()} {ctx.vllm('vllm:cache_config_info', f'gpu_memory_utilization={utilization_label(u)!r}'.replace(chr(39), chr(34)))})"
            for u in shares
        ]
        known = "|".join(utilization_label(u).replace(".", "\\\\.") for u in shares)
        branches.append(
            f"({ctx.gpu_used} / {ctx.gpu_total} > {level(util)}\n"
            f"  unless {ctx.on_host()} {ctx.vllm('vllm:cache_config_info', f'gpu_memory_utilization=~{chr(34)}{known}{chr(34)}')})"
        )
        alerts.append(
            Alert(
                "GPUMemoryHigh",
                severity,
                "\nor ".join(branches),
                g.dur("level_for"),
                "A GPU's memory is close to full, beyond what vLLM preallocated.",
                fill(
                    f"{CARD} is {{{{ $value | humanizePercentage }}}} full. vLLM preallocates its "
                    "gpu_memory_utilization of the card at start-up (<util> where it reports none of the "
                    "profiles' values); this alert fires when <used> of the headroom above that is gone.",
                    util=f"{util:.0%}",
                    used=f"{g.num(key):.0%}",
                ),
            )
        )

    # The card's rules read DCGM, which cannot tell which side's process grew: with a canary they
    # stay per card, its growth per request served by every side of the host, and skip windows
    # that reach back to a restart of any side. The exporter's per-process rules below are per side.
    fast_s = g.seconds("fast_window")
    card_fast_requests = ctx.host_requests("gpu", "fast_window")
    card_restarted = ctx.restarted_within(fast_s, "gpu", per_host=True)
    fast_requests = ctx.requests("gpu", "fast_window")
    restarted = ctx.restarted_within(fast_s, "gpu")
    per_request = number(g.size("fast_min_growth_per_request"))
    alerts.append(
        Alert(
            "GPUMemoryLeakSuspected",
            "warning",
            f"{ctx.gpu_fast} * {number(fast_s)}\n  / {ctx.on_host()} group_left () {card_fast_requests}\n> {per_request}\n"
            f"and {_growing(ctx.gpu_fast, g.bytes_per_second('fast_min_growth_rate'))}\n"
            f"and {ctx.gpu_fast} * {number(fast_s)} > {number(g.size('fast_min_growth'))}\n"
            f"and {ctx.on_host()} ({card_fast_requests} >= {number(g.num('fast_min_requests'))})\n"
            + _net_growth(g, ctx.gpu_low_growth_fast, ctx.gpu_released)
            + f"unless {ctx.on_host()} {card_restarted}",
            g.dur("fast_for"),
            "A GPU's memory grows with every request: a leak, not a one-time step.",
            fill(
                f"{CARD} gained {{{{ $value | humanize1024 }}}}B per request served over the last <window> "
                "(growth in most of its slices: a one-time step does not count).",
                window=g.dur("fast_window"),
            ),
        )
    )
    alerts.append(
        Alert(
            "GPUMemoryLeakSuspected",
            "critical",
            f"{ctx.gpu_free} / {ctx.gpu_fast} < {number(g.seconds('exhaustion_critical_within'))}\n"
            f"and {_growing(ctx.gpu_fast, g.bytes_per_second('fast_min_growth_rate'))}\n"
            + _net_growth(g, ctx.gpu_low_growth_fast, ctx.gpu_released)
            + f"unless {ctx.on_host()} {card_restarted}",
            g.dur("fast_for"),
            "A GPU's memory grows with every request: a leak, not a one-time step.",
            f"{CARD} keeps growing and is full in {{{{ $value | humanizeDuration }}}} at the rate of the last "
            f"{g.dur('fast_window')}. The healer drains and restarts vLLM before the out-of-memory error does.",
            remediate=True,
        )
    )

    slow_s = g.seconds("slow_window")
    slow_requests = ctx.host_requests("gpu", "slow_window")
    alerts.append(
        Alert(
            "GPUMemoryGrowthPerRequest",
            "warning",
            f"{ctx.gpu_slow} * {number(slow_s)}\n  / {ctx.on_host()} group_left () {slow_requests}\n"
            f"> {number(g.size('slow_min_growth_per_request'))}\n"
            f"and {_growing(ctx.gpu_slow, g.bytes_per_second('slow_min_growth_rate'))}\n"
            f"and {ctx.gpu_slow} * {number(slow_s)} > {number(g.size('slow_min_growth'))}\n"
            f"and {ctx.on_host()} ({slow_requests} >= {number(g.num('slow_min_requests'))})\n"
            + _net_growth(g, ctx.gpu_low_growth_slow, ctx.gpu_released)
            + f"unless {ctx.on_host()} {ctx.restarted_within(slow_s, 'gpu', per_host=True)}",
            g.dur("slow_for"),
            "A GPU's memory grows slowly but steadily with the requests served.",
            fill(
                f"{CARD} gained {{{{ $value | humanize1024 }}}}B per request served over the last <window> "
                "(growth in most of its slices). Times your requests per day, that is the daily growth.",
                window=g.dur("slow_window"),
            ),
        )
    )

    alerts.append(
        Alert(
            "GPUProcessMemoryLeak",
            "warning",
            f"{ctx.gpu_process_fast} * {number(fast_s)}\n  / {ctx.on_side()} group_left () {fast_requests}\n> {per_request}\n"
            f"and {_growing(ctx.gpu_process_fast, g.bytes_per_second('fast_min_growth_rate'))}\n"
            f"and {ctx.gpu_process_fast} * {number(fast_s)} > {number(g.size('fast_min_growth'))}\n"
            f"and {ctx.on_side()} ({fast_requests} >= {number(g.num('fast_min_requests'))})\n"
            + _net_growth(g, ctx.gpu_process_low_growth, ctx.gpu_process_released)
            + f"unless {ctx.on_side()} {restarted}",
            g.dur("fast_for"),
            "A vLLM process's GPU memory grows with every request.",
            fill(
                f"{ROLE} holds {{{{ $value | humanize1024 }}}}B more GPU memory on GPU {{{{ $labels.gpu }}}} per "
                "request served over the last <window> (growth in most of its slices).",
                window=g.dur("fast_window"),
            ),
        )
    )

    alerts.append(
        Alert(
            "VRAMRetentionHigh",
            "warning",
            f"{ctx.exporter('leakwatch_vram_retention_ratio')} > {number(g.num('retention_ratio'))}\n"
            f"and on (instance, job, gpu) "
            f"{_growing(ctx.gpu_retained, g.bytes_per_second('retention_min_growth_rate'))}\n"
            + _net_growth(g, ctx.gpu_retained_low_growth, None, "on (instance, job, gpu) ")
            + f"unless on (instance, job, gpu) ({ctx.gpu_retained_released} > {number(g.size('release_min'))})\n"
            f"unless {ctx.on_side()} {ctx.restarted_within(g.seconds('retention_window'), 'gpu')}",
            g.dur("retention_for"),
            "GPU memory taken during requests is not given back, and it accumulates.",
            fill(
                "GPU {{ $labels.gpu }} on {{ $labels.instance }}"
                + SIDE
                + " still holds {{ $value | humanizePercentage }} of "
                "the memory gained during the last burst of requests once vLLM was idle again, and its memory "
                "above the post-warm-up baseline grows by more than <mib> MiB an hour in most slices of the "
                "last <window>.",
                mib=number(g.mib_per_hour("retention_min_growth_rate")),
                window=g.dur("retention_window"),
            ),
        )
    )
    used = ctx.exporter("leakwatch_gpu_memory_used_bytes")
    alerts += _running_out(
        ctx,
        Memory(
            "gpu",
            "GPUMemoryRunningOut",
            ctx.device_memory_rate,
            ctx.vllm_gpu_memory_rate,
            free=f"{ctx.exporter('leakwatch_gpu_memory_total_bytes')} - {used}",
            falls=f"deriv({used}[{{window}}])",
            vllm=ctx.vllm_gpu_memory,
            on=on(ctx.host + ["instance", "job", "gpu"]),
        ),
    )
    card_lows = [ctx.gpu_low_growth_fast, ctx.gpu_low_growth_slow]
    keep = {
        ("GPUMemoryLeakSuspected", "warning"): _still_leaking(
            ctx,
            g,
            f"{ctx.gpu_fast} * {number(fast_s)}\n  / {ctx.on_host()} group_left () {card_fast_requests}",
            card_lows,
            ctx.gpu_released,
            card_restarted,
            per_host=True,
        ),
        # (The critical twins have none: the healer acts on their first firing.)
        ("GPUMemoryGrowthPerRequest", "warning"): _still_leaking(
            ctx,
            g,
            f"{ctx.gpu_slow} * {number(slow_s)}\n  / {ctx.on_host()} group_left () {slow_requests}",
            [ctx.gpu_low_growth_slow],
            ctx.gpu_released,
            ctx.restarted_within(slow_s, "gpu", per_host=True),
            per_host=True,
        ),
        ("GPUProcessMemoryLeak", "warning"): _still_leaking(
            ctx,
            g,
            f"{ctx.gpu_process_fast} * {number(fast_s)}\n  / {ctx.on_side()} group_left () {fast_requests}",
            [ctx.gpu_process_low_growth],
            ctx.gpu_process_released,
            restarted,
        ),
        ("VRAMRetentionHigh", "warning"): _still_leaking(
            ctx,
            g,
            ctx.exporter("leakwatch_vram_retention_ratio"),
            [ctx.gpu_retained_low_growth],
            ctx.gpu_retained_released,
            ctx.restarted_within(g.seconds("retention_window"), "gpu"),
        ),
    }
    return [replace(a, keep_firing_while=keep.get((a.name, a.severity), a.keep_firing_while)) for a in alerts]


def within_cache_bounds(ctx: Context, labels: list[str]) -> str:
    """`unless` clause for a remediated alert: spares vLLM (`labels`: per role, or none for all its
    roles) while its growth since the baseline is still within its declared cache bounds and the
    rest of those bounds fits what the host can still give: a bounded cache filling up
    (config/vllm_leaks.yaml), not a leak to restart. Only explicit bounds exist as series
    (leakwatch/exporter/cache_bounds.py), so without one nothing is spared and the alerts act as
    before. Joined per side and exporter (instance, job), as leakwatch_host_memory_growth_bytes is."""
    keys = ctx.side + ["instance", "job", *labels]
    bound = f"sum {by(keys)} ({ctx.exporter('leakwatch_vllm_cache_bound_bytes')})"
    growth = f"sum {by(keys)} ({ctx.exporter('leakwatch_host_memory_growth_bytes')})"
    return (
        f"unless {on(keys)} (\n  {growth} <= {on(keys)} {bound}\n"
        f"  and {on(keys)} ({bound} - {on(keys)} {growth} < {ctx.on_host()} group_left () {ctx.host_available})\n)"
    )


def host_alerts(ctx: Context) -> list[Alert]:
    h = ctx.t.section("host")
    alerts = []
    window_s = h.seconds("leak_window")
    requests = ctx.requests("host", "leak_window")
    restarted = ctx.restarted_within(window_s, "host")
    growing = _growing(ctx.process_memory_deriv, h.bytes_per_second("leak_min_growth_rate"))
    above_baseline = (
        f"on (instance, job, role) "
        f"({ctx.exporter('leakwatch_host_memory_growth_bytes')} > {number(h.size('leak_min_growth_since_baseline'))})"
    )
    alerts.append(
        Alert(
            "HostMemoryLeak",
            "warning",
            f"{ctx.process_memory_deriv} * {number(window_s)}\n  / {ctx.on_side()} group_left () {requests}\n> 0\n"
            f"and {growing}\n"
            f"and {above_baseline}\n"
            f"and {ctx.on_side()} ({requests} >= {number(h.num('leak_min_requests'))})\n"
            + _net_growth(h, ctx.process_memory_low_growth, ctx.process_memory_released)
            + f"unless {ctx.on_side()} {restarted}",
            h.dur("leak_for"),
            "A vLLM process's host memory (anonymous + swap) grows with the requests it serves.",
            fill(
                f"{ROLE} grew {{{{ $value | humanize1024 }}}}B per request served over the last <window> (anonymous "
                "plus swapped memory, growth in most of its slices) and is above its post-warm-up baseline.",
                window=h.dur("leak_window"),
            ),
        )
    )
    alerts.append(
        Alert(
            "HostMemoryLeak",
            "critical",
            f"{ctx.host_available} / {ctx.on_host()} group_right () {ctx.process_memory_deriv}\n"
            f"  < {number(h.seconds('exhaustion_critical_within'))}\n"
            f"and {growing}\n"
            f"and {above_baseline}\n"
            + _net_growth(h, ctx.process_memory_low_growth, ctx.process_memory_released)
            + f"unless {ctx.on_side()} {restarted}\n"
            # A declared cache still filling within its bound, with room for the rest: not a leak
            # to restart (the warning above still tells people that it grows).
            + within_cache_bounds(ctx, ["role"]),
            h.dur("leak_for"),
            "A vLLM process's host memory (anonymous + swap) grows with the requests it serves.",
            f"{ROLE} keeps growing; the host's available memory (or the container's limit) runs out in "
            "{{ $value | humanizeDuration }} at this rate. The healer drains and restarts vLLM before the "
            "kernel's OOM killer picks a process.",
            remediate=True,
        )
    )
    per_request = f"{ctx.process_memory_deriv} * {number(window_s)}\n  / {ctx.on_side()} group_left () {requests}"
    still = _still_leaking(ctx, h, per_request, [ctx.process_memory_low_growth], ctx.process_memory_released, restarted)
    alerts = [replace(a, keep_firing_while=still) if a.severity == "warning" else a for a in alerts]

    # The fast pair's critical twin spares vLLM the same way (summed over its roles): a cache that
    # fills fast but levels off within what the host can give runs nothing out.
    alerts += _spare_bounded(
        within_cache_bounds(ctx, []),
        _running_out(
            ctx,
            Memory(
                "host",
                "HostMemoryRunningOut",
                ctx.host_available_fall,
                ctx.vllm_host_memory_rate,
                free=ctx.host_available,
                falls=f"-deriv({ctx.host_available}[{{window}}])",
                vllm=ctx.vllm_host_memory,
                on=ctx.on_host(),
            ),
        ),
    )

    alerts.append(
        Alert(
            "HostSwapGrowing",
            "warning",
            f"{ctx.swap_deriv} * 3600 > {number(h.bytes_per_second('swap_min_growth_rate') * 3600)}\n"
            f"and ({ctx.swap_used} > {number(h.size('swap_min_used'))})",
            h.dur("swap_for"),
            "The host's swap use keeps growing: leaked memory may be hiding in swap.",
            fill(
                "Swap in use on {{ $labels.instance }} grows {{ $value | humanize1024 }}B per hour (in most slices "
                "of the last <window>). Resident memory can look flat while leaked pages move to swap.",
                window=h.dur("swap_window"),
            ),
        )
    )

    # What vLLM can hold at most: what it holds plus what it can still take (the host's available
    # memory and free swap, or the container's headroom). MemTotal is shared with the system and
    # other programs, so a share of it is a level vLLM may never reach before the OOM killer acts.
    # Per side: with a canary, each side's share of what it can have (both take from the host's).
    pss = f"sum {ctx.by_side()} ({ctx.exporter('leakwatch_process_proportional_memory_bytes')})"
    for severity, key in (("warning", "usage_warning_share"), ("critical", "usage_critical_share")):
        alerts.append(
            Alert(
                "HighMemoryUsage",
                severity,
                f"{pss}\n  / {ctx.on_side()} ({pss} + {ctx.on_host()} group_left () {ctx.host_available})\n"
                f"> {number(h.num(key))}",
                h.dur("usage_for"),
                "vLLM's processes hold most of the memory they can have.",
                "vLLM's processes (API server, EngineCore, workers; proportional set size) hold "
                "{{ $value | humanizePercentage }} of what they can have: their own memory plus the host's "
                "available memory and free swap, or the container's limit.",
            )
        )
    return alerts


def _spare_bounded(spared: str, alerts: list[Alert]) -> list[Alert]:
    """The critical (remediated) alerts with `spared` appended to their condition and their hold."""
    return [
        replace(a, expr=f"{a.expr}\n{spared}", keep_firing_while=f"{a.keep_firing_while}\n{spared}")
        if a.severity == "critical" and a.keep_firing_while
        else replace(a, expr=f"{a.expr}\n{spared}")
        if a.severity == "critical"
        else a
        for a in alerts
    ]


def metrics_alerts(ctx: Context) -> list[Alert]:
    m = ctx.t.section("metrics")
    return [
        Alert(
            "VLLMMetricsCardinalityGrowing",
            "warning",
            f"{ctx.series_deriv} * 3600 > {number(m.per_second('series_min_growth_rate') * 3600)}\n"
            f"unless {ctx.on_side()} {ctx.restarted_within(m.seconds('series_window'), 'metrics')}",
            m.dur("series_for"),
            "vLLM's /metrics keeps gaining series (label cardinality).",
            fill(
                "vLLM's /metrics on {{ $labels.instance }}"
                + SIDE
                + " gains {{ $value | humanize }} series per hour (in most "
                "slices of the last <window>). Churning label values (e.g. per-adapter labels) grow the API "
                "server's memory and Prometheus's.",
                window=m.dur("series_window"),
            ),
        )
    ]


def bucket_label(le: float) -> str:
    """A bucket boundary as vLLM's prometheus_client writes it (15.0, 2.5, 0.2)."""
    return repr(float(le))


def _bucket_share(ctx: Context, histogram: str, le: float, window: str, labels: list[str]) -> str:
    """Share of observations above a bucket boundary (exact: no interpolation)."""
    grouping = by(labels)
    count = f"sum {grouping} (rate({ctx.vllm(histogram + '_count')}[{window}]))"
    bucket = ctx.vllm(histogram + "_bucket", f'le="{bucket_label(le)}"')
    return f"({count}\n  - sum {grouping} (rate({bucket}[{window}])))\n/ {count}"


def serving_alerts(ctx: Context) -> list[Alert]:
    s = ctx.t.section("serving")
    up = ctx.vllm("up")

    def processes(role: str) -> str:
        return ctx.exporter("leakwatch_processes", f'role="{role}"')

    # One scrape target, and its side of a canary (docs/canary.md) in the alert's labels.
    target = ["instance", "job", DEPLOYMENT_LABEL]
    exporter_target = by(target)

    alerts = [
        Alert(
            "VLLMDown",
            "critical",
            f"{up} == 0",
            s.dur("down_for"),
            "Prometheus cannot scrape vLLM.",
            "vLLM at {{ $labels.instance }}" + SIDE + " has not answered Prometheus's scrapes for "
            f"{s.dur('down_for')}: it is down, stuck in start-up, or unreachable.",
        ),
        Alert(
            "TargetDown",
            "warning",
            f"up == 0 unless on (job, instance) {up}",
            s.dur("target_down_for"),
            "A scrape target of the stack is down.",
            "{{ $labels.job }} at {{ $labels.instance }}" + SIDE + " has been down for "
            f"{s.dur('target_down_for')}; the alerts that read its metrics are blind meanwhile.",
        ),
        Alert(
            "VLLMEngineDown",
            "critical",
            f"(sum {exporter_target} ({processes('api_server')}) > 0)\n"
            f"unless {on(target)}\n"
            f"(sum {exporter_target} ({processes('engine_core')}) > 0)",
            s.dur("engine_down_for"),
            "vLLM's API server is running without its engine.",
            "The exporter at {{ $labels.instance }}"
            + SIDE
            + " sees vLLM's API server but no VLLM::EngineCore process: "
            "requests cannot be served.",
        ),
    ]
    for severity, key in (("warning", "restarts_warning"), ("critical", "restarts_critical")):
        alerts.append(
            Alert(
                "VLLMRestartingOften",
                severity,
                f"changes({ctx.vllm('process_start_time_seconds')}[{s.dur('restarts_window')}]) >= {number(s.num(key))}",
                s.dur("restarts_for"),
                "vLLM keeps restarting.",
                f"vLLM at {{{{ $labels.instance }}}}{SIDE} restarted {{{{ $value }}}} times in {s.dur('restarts_window')}. "
                "A crash loop (e.g. out of memory every few hours) hides from the leak rules, which skip "
                "windows that contain a restart.",
            )
        )

    kv_window = s.dur("kv_window")
    alerts.append(
        Alert(
            "KVCacheSaturated",
            "warning",
            f"avg_over_time({ctx.vllm('vllm:kv_cache_usage_perc')}[{kv_window}]) > {number(s.num('kv_usage_share'))}\n"
            f"and increase({ctx.vllm('vllm:num_preemptions_total')}[{kv_window}]) > 0",
            s.dur("kv_for"),
            "vLLM's KV cache is full and requests are being preempted.",
            f"The KV cache of {{{{ $labels.model_name }}}} at {{{{ $labels.instance }}}}{SIDE} averaged "
            f"{{{{ $value | humanizePercentage }}}} over {kv_window} and requests were preempted (recomputed): "
            "throughput and latency suffer. Lower max_num_seqs or add capacity.",
        )
    )
    alerts.append(
        Alert(
            "VLLMQueueBacklog",
            "warning",
            f"min_over_time({ctx.vllm('vllm:num_requests_waiting')}[{s.dur('queue_window')}]) >= {number(s.num('queue_min_waiting'))}",
            s.dur("queue_for"),
            "Requests keep waiting in vLLM's queue.",
            f"At least {{{{ $value }}}} requests for {{{{ $labels.model_name }}}} at {{{{ $labels.instance }}}}{SIDE} were "
            f"waiting at every moment of the last {s.dur('queue_window')}: the server is saturated.",
        )
    )

    window = s.dur("objective_window")
    labels = ["instance", "job", "model_name", DEPLOYMENT_LABEL]
    min_requests = number(s.num("objective_min_requests"))

    def enough(histogram: str, minimum: str) -> str:
        return f"sum {by(labels)} (increase({ctx.vllm(histogram + '_count')}[{window}])) >= {minimum}"

    def slow(histogram: str, limit: float, minimum: str) -> str:
        count = f"sum {by(labels)} (increase({ctx.vllm(histogram + '_count')}[{window}]))"
        bucket = ctx.vllm(histogram + "_bucket", f'le="{bucket_label(limit)}"')
        return f"{count}\n  - sum {by(labels)} (increase({bucket}[{window}])) >= {minimum}"

    min_slow = number(s.num("objective_min_slow"))
    objectives = (
        (
            "VLLMTimeToFirstTokenHigh",
            "vllm:time_to_first_token_seconds",
            "ttft_limit",
            "ttft_max_share",
            min_requests,
            min_slow,
            "Too many requests wait long for their first token.",
            "requests waited more than <limit> s for the first token",
        ),
        (
            "VLLMInterTokenLatencyHigh",
            "vllm:inter_token_latency_seconds",
            "itl_limit",
            "itl_max_share",
            number(s.num("itl_min_tokens")),
            number(s.num("itl_min_slow_tokens")),
            "Too many tokens take long to generate.",
            "output tokens took more than <limit> s after the previous one",
        ),
        (
            "VLLMRequestLatencyHigh",
            "vllm:e2e_request_latency_seconds",
            "latency_limit",
            "latency_max_share",
            min_requests,
            min_slow,
            "Too many requests take longer than the latency objective.",
            "requests took more than <limit> s end to end",
        ),
    )
    for name, histogram, limit_key, share_key, minimum, minimum_slow, summary, what in objectives:
        alerts.append(
            Alert(
                name,
                "warning",
                f"(\n{_bucket_share(ctx, histogram, s.num(limit_key), window, labels)}\n) > {number(s.num(share_key))}\n"
                f"and {enough(histogram, minimum)}\n"
                f"and {slow(histogram, s.num(limit_key), minimum_slow)}",
                s.dur("objective_for"),
                summary,
                fill(
                    f"{{{{ $value | humanizePercentage }}}} of {{{{ $labels.model_name }}}}'s {what} over the last "
                    "<window> at {{ $labels.instance }}" + SIDE + " (objective: at most <share>).",
                    window=window,
                    limit=number(s.num(limit_key)),
                    share=f"{s.num(share_key):.0%}",
                ),
            )
        )

    error_window = s.dur("error_window")
    v1 = 'handler=~"/v1/.+"'
    total = f"sum {by(target)} (rate({ctx.vllm('http_requests_total', v1)}[{error_window}]))"
    failed = ctx.vllm("http_requests_total", v1, 'status="5xx"')
    errors = f"sum {by(target)} (rate({failed}[{error_window}]))"
    for severity, key in (("warning", "error_warning_share"), ("critical", "error_critical_share")):
        alerts.append(
            Alert(
                "VLLMRequestErrors",
                severity,
                f"{errors}\n  / {total}\n> {number(s.num(key))}\n"
                f"and sum {by(target)} (increase({ctx.vllm('http_requests_total', v1)}[{error_window}])) "
                f">= {number(s.num('error_min_requests'))}\n"
                f"and sum {by(target)} (increase({failed}[{error_window}])) >= {number(s.num('error_min_errors'))}",
                s.dur("error_for"),
                "vLLM answers too many requests with server errors.",
                f"{{{{ $value | humanizePercentage }}}} of the /v1 requests to {{{{ $labels.instance }}}}{SIDE} failed with "
                f"a 5xx status over the last {error_window}.",
            )
        )

    reg = s.dur("regression_window")
    mean = f"{ctx.model_latency_mean}:mean{reg}"
    served = f"{ctx.model_requests}:increase{reg}"
    week = format_duration(604800 * ctx.t.time_scale)
    min_reg = number(s.num("regression_min_requests"))
    alerts.append(
        Alert(
            "VLLMRequestDurationRegression",
            "warning",
            f"{mean} / {mean} offset {week} > {number(s.num('regression_factor'))}\n"
            f"and {served} >= {min_reg}\n"
            f"and {served} offset {week} >= {min_reg}",
            s.dur("regression_for"),
            "Requests take much longer than at the same time last week.",
            fill(
                "The mean request duration of {{ $labels.model_name }} at {{ $labels.instance }}"
                + SIDE
                + " over the last "
                "<window> is {{ $value | humanize }} times that of the same hour a week ago (both hours served "
                "at least <min> requests).",
                window=reg,
                min=min_reg,
            ),
        )
    )

    gc_window, gc_base = s.dur("gc_window"), s.dur("gc_baseline_window")
    gen2 = ctx.vllm("python_gc_collections_total", 'generation="2"')

    def per_request(window: str) -> str:
        return (
            f"sum {ctx.by_side('instance', 'job')} (increase({gen2}[{window}]))\n"
            f"  / {ctx.on_side()} group_left () sum {ctx.by_side()} (increase({ctx.vllm('vllm:request_success_total')}[{window}]))"
        )

    alerts.append(
        Alert(
            "PythonGCSpike",
            "warning",
            f"(\n  {per_request(gc_window)}\n)\n> {number(s.num('gc_factor'))} * (\n  {per_request(gc_base)}\n)\n"
            f"and sum {ctx.by_side('instance', 'job')} (increase({gen2}[{gc_window}])) >= {number(s.num('gc_min_collections'))}\n"
            f"and {ctx.on_side()} sum {ctx.by_side()} (increase({ctx.vllm('vllm:request_success_total')}[{gc_window}])) "
            f">= {number(s.num('gc_min_requests'))}",
            s.dur("gc_for"),
            "vLLM's API server runs full Python garbage collections far more often per request than usual.",
            fill(
                "vLLM's API server at {{ $labels.instance }}"
                + SIDE
                + " ran {{ $value | humanize }} generation-2 garbage "
                "collections per request over the last <window>, more than <factor> times its rate over the "
                "last <base>. Growing numbers of live Python objects (a leak) make full collections frequent.",
                window=gc_window,
                factor=number(s.num("gc_factor")),
                base=gc_base,
            ),
        )
    )
    return alerts


def meta_alerts(ctx: Context) -> list[Alert]:
    m = ctx.t.section("meta")
    return [
        Alert(
            "PrometheusRuleFailures",
            "warning",
            f"increase(prometheus_rule_evaluation_failures_total[{m.dur('rule_failures_window')}]) > 0",
            m.dur("rule_failures_for"),
            "Prometheus fails to evaluate some rules.",
            "Prometheus at {{ $labels.instance }} failed {{ $value | humanize }} evaluations of rule group "
            "{{ $labels.rule_group }}; the alerts in it may stay silent.",
        ),
        Alert(
            "AlertmanagerNotificationsFailing",
            "warning",
            f"increase(alertmanager_notifications_failed_total[{m.dur('notifications_window')}]) > 0",
            m.dur("notifications_for"),
            "Alertmanager cannot deliver notifications to a receiver.",
            "Alertmanager at {{ $labels.instance }} failed {{ $value | humanize }} notifications through "
            "{{ $labels.integration }}; for the remediation webhook this means the healer cannot act.",
        ),
        Alert(
            "Watchdog",
            "none",
            "vector(1)",
            format_duration(60 * ctx.t.time_scale),
            "Always firing: proves the path from Prometheus through Alertmanager works.",
            "This alert always fires. Route it to a dead man's switch (a heartbeat that pages when "
            "notifications stop); if it is missing, alerting is broken.",
        ),
    ]


GROUPS = (
    ("leakwatch.gpu", gpu_alerts),
    ("leakwatch.host", host_alerts),
    ("leakwatch.metrics", metrics_alerts),
    ("leakwatch.serving", serving_alerts),
    ("leakwatch.meta", meta_alerts),
)
