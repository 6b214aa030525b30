"""The leakwatch.gpu group: a card's memory level above what vLLM preallocated, its growth per
request (DCGM, per card) and a vLLM process's (the exporter, per side), memory kept after bursts
of requests, and the GPU's fast-leak pair. DCGM cannot tell which side's process grew, so the
card's rules join per host where the process rules join per side; that split is why the GPU rules
are a group, and a module, of their own."""

from __future__ import annotations

from dataclasses import replace

from ..core.alert_config import number
from .alert_rule import CARD, ROLE, SIDE, Alert
from .leak_conditions import grows_faster, net_growth, still_leaking
from .profile_values import preallocated_share, profile_shares
from .promql import fill, matcher, on, one_of
from .recording import Context
from .running_out import Memory, running_out_alerts


def utilization_label(share: float) -> str:
    """gpu_memory_utilization as vLLM's vllm:cache_config_info label writes it (Python's str())."""
    return str(float(share))


def gpu_alerts(ctx: Context) -> list[Alert]:
    g = ctx.thresholds.section("gpu")
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
            f"  and {ctx.on_host()} {ctx.vllm('vllm:cache_config_info', matcher('gpu_memory_utilization', utilization_label(u)))})"
            for u in shares
        ]
        known = one_of(utilization_label(u) for u in shares)
        branches.append(
            f"({ctx.gpu_used} / {ctx.gpu_total} > {level(util)}\n"
            f"  unless {ctx.on_host()} {ctx.vllm('vllm:cache_config_info', matcher('gpu_memory_utilization', known, '=~'))})"
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
            f"and {grows_faster(ctx.gpu_fast, g.bytes_per_second('fast_min_growth_rate'))}\n"
            f"and {ctx.gpu_fast} * {number(fast_s)} > {number(g.size('fast_min_growth'))}\n"
            f"and {ctx.on_host()} ({card_fast_requests} >= {number(g.num('fast_min_requests'))})\n"
            + net_growth(g, ctx.gpu_low_growth_fast, ctx.gpu_released)
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
            f"and {grows_faster(ctx.gpu_fast, g.bytes_per_second('fast_min_growth_rate'))}\n"
            + net_growth(g, ctx.gpu_low_growth_fast, ctx.gpu_released)
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
            f"and {grows_faster(ctx.gpu_slow, g.bytes_per_second('slow_min_growth_rate'))}\n"
            f"and {ctx.gpu_slow} * {number(slow_s)} > {number(g.size('slow_min_growth'))}\n"
            f"and {ctx.on_host()} ({slow_requests} >= {number(g.num('slow_min_requests'))})\n"
            + net_growth(g, ctx.gpu_low_growth_slow, ctx.gpu_released)
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
            f"and {grows_faster(ctx.gpu_process_fast, g.bytes_per_second('fast_min_growth_rate'))}\n"
            f"and {ctx.gpu_process_fast} * {number(fast_s)} > {number(g.size('fast_min_growth'))}\n"
            f"and {ctx.on_side()} ({fast_requests} >= {number(g.num('fast_min_requests'))})\n"
            + net_growth(g, ctx.gpu_process_low_growth, ctx.gpu_process_released)
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
            f"{grows_faster(ctx.gpu_retained, g.bytes_per_second('retention_min_growth_rate'))}\n"
            + net_growth(g, ctx.gpu_retained_low_growth, None, "on (instance, job, gpu) ")
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
    alerts += running_out_alerts(
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
        ("GPUMemoryLeakSuspected", "warning"): still_leaking(
            ctx,
            g,
            f"{ctx.gpu_fast} * {number(fast_s)}\n  / {ctx.on_host()} group_left () {card_fast_requests}",
            card_lows,
            ctx.gpu_released,
            card_restarted,
            per_host=True,
        ),
        # (The critical twins have none: the healer acts on their first firing.)
        ("GPUMemoryGrowthPerRequest", "warning"): still_leaking(
            ctx,
            g,
            f"{ctx.gpu_slow} * {number(slow_s)}\n  / {ctx.on_host()} group_left () {slow_requests}",
            [ctx.gpu_low_growth_slow],
            ctx.gpu_released,
            ctx.restarted_within(slow_s, "gpu", per_host=True),
            per_host=True,
        ),
        ("GPUProcessMemoryLeak", "warning"): still_leaking(
            ctx,
            g,
            f"{ctx.gpu_process_fast} * {number(fast_s)}\n  / {ctx.on_side()} group_left () {fast_requests}",
            [ctx.gpu_process_low_growth],
            ctx.gpu_process_released,
            restarted,
        ),
        ("VRAMRetentionHigh", "warning"): still_leaking(
            ctx,
            g,
            ctx.exporter("leakwatch_vram_retention_ratio"),
            [ctx.gpu_retained_low_growth],
            ctx.gpu_retained_released,
            ctx.restarted_within(g.seconds("retention_window"), "gpu"),
        ),
    }
    return [replace(a, keep_firing_while=keep.get((a.name, a.severity), a.keep_firing_while)) for a in alerts]
