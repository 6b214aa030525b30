"""The leakwatch.host group: a vLLM process's host memory growing with the requests it serves,
the host's fast-leak pair, swap growing, and the share of its memory vLLM holds. Only host memory
has declared cache bounds (config/vllm_leaks.yaml), so the clause that spares a bounded cache
still filling up from the remediated alerts lives here with them."""

from __future__ import annotations

from dataclasses import replace

from ..core.alert_config import number
from .alert_rule import ROLE, Alert
from .leak_conditions import grows_faster, net_growth, still_leaking
from .promql import by, fill, on
from .recording import Context
from .running_out import Memory, running_out_alerts


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
    h = ctx.thresholds.section("host")
    alerts = []
    window_s = h.seconds("leak_window")
    requests = ctx.requests("host", "leak_window")
    restarted = ctx.restarted_within(window_s, "host")
    growing = grows_faster(ctx.process_memory_deriv, h.bytes_per_second("leak_min_growth_rate"))
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
            + net_growth(h, ctx.process_memory_low_growth, ctx.process_memory_released)
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
            + net_growth(h, ctx.process_memory_low_growth, ctx.process_memory_released)
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
    still = still_leaking(ctx, h, per_request, [ctx.process_memory_low_growth], ctx.process_memory_released, restarted)
    alerts = [replace(a, keep_firing_while=still) if a.severity == "warning" else a for a in alerts]

    # The fast pair's critical twin spares vLLM the same way (summed over its roles): a cache that
    # fills fast but levels off within what the host can give runs nothing out.
    alerts += _spare_bounded(
        within_cache_bounds(ctx, []),
        running_out_alerts(
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
