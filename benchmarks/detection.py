"""`make bench-detection`: for every scenario of the library, when the first alert fires with the
articles' rules (translated faithfully) and with ours, and how many alerts 30 healthy days raise.

The last line is the summary:
  detection: article_a_vllm_min=N slow_leak_min=N worker_rss_min=N healthy_false_alerts=N
             healthy_warning_episodes=N leak_requests_p90=N fast_leak_lead_min=N fast_leak_healthy_pages=N
(minutes from leak start, `none` where nothing fired; false alerts are warning and critical episodes
summed over every healthy scenario and seed; leak_requests_p90 counts the requests served between
the start of a 2 or 3 MB/request GPU leak and the first alert, over leaks starting at six hours of
the day, `none` if one was missed; fast_leak_lead_min is the worst, over the fast leaks, of the
minutes between the first critical alert and the memory running out, counted from the start or the
healer's last restart, `none` if one ran out first; fast_leak_healthy_pages counts the fast-leak
rules' episodes in the healthy histories). Targets: article A within 60 min and before 25 % of the
remaining headroom is used, the slow leak within 6 h, the worker leak within 3 h, no episode in any
healthy month, every GPU leak within 150 leaking requests, every fast leak paged 20 min before it
runs out of memory and no fast-leak episode when healthy.
"""

from __future__ import annotations

import argparse
import math
import sys
import time

from leakwatch.backtest.scenario_run import ARTICLES, OURS, Outcome, run_scenario
from leakwatch.core.shutdown import unwind_on_sigterm
from leakwatch.rules.running_out import RUNNING_OUT_ALERTS
from leakwatch.scenarios import library


def _fmt(first: tuple[float, str] | None) -> str:
    return "none" if first is None else f"{first[0] / 60:.0f} min {first[1]}"


def _article_firsts(outcome: Outcome, noisy: set[str]) -> str:
    """Each article rule's first firing after the leak start; * marks rules that also fire when healthy."""
    firsts: dict[str, float] = {}
    for r in outcome.alerts(ARTICLES):
        times = [e.firing_at for e in r.fired if e.firing_at >= outcome.origin]
        if times:
            firsts[r.rule.name] = min(times) - outcome.origin
    if not firsts:
        return "none fired"
    return ", ".join(
        f"{name}{'*' if name in noisy else ''} {t / 60:.0f}" for name, t in sorted(firsts.items(), key=lambda x: x[1])
    )


# Shorter histories for a quick check (tests): long enough for every target to be measurable.
QUICK_DAYS = {"article_a_published": 1.0, "metrics_cardinality": 0.5, "healthy_fast_host": 1.2}
QUICK_HEALTHY_DAYS = 2.0
QUICK_DEFAULT_DAYS = 0.4
QUICK_LEAK_HOURS = (0.0, 15.0)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile: the smallest value with at least q of the values at or below it."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="shorter histories (2 healthy days per scenario and seed, 10 h leaks, two leak hours)",
    )
    parser.add_argument("--healthy-days", type=float, default=None, help="length of every healthy history")
    parser.add_argument("--resolution", type=float, default=60.0, help="seconds between simulated scrapes")
    parser.add_argument("--step", type=float, default=60.0, help="evaluation interval in seconds")
    args = parser.parse_args(argv)
    unwind_on_sigterm()  # each backtest's Prometheus and work folder go with it

    def days(name: str) -> float | None:
        if name in library.healthy():
            # (The healthy fast host's quick day still holds a start, its daily restart and hours after.)
            return args.healthy_days or (QUICK_DAYS.get(name, QUICK_HEALTHY_DAYS) if args.quick else None)
        if name in library.fast_leaks():
            return None  # hours: as long as it takes the memory to run out
        return QUICK_DAYS.get(name, QUICK_DEFAULT_DAYS) if args.quick else None

    started = time.monotonic()
    noisy: set[str] = set()
    false_alerts = warning_episodes = fast_pages = 0
    for name in library.healthy():
        for offset in library.HEALTHY_SEED_OFFSETS:
            seed = library.SCENARIOS[name].seed + offset
            healthy = run_scenario(name, days(name), seed=seed, resolution_s=args.resolution, step_s=args.step)
            noisy |= {key.split("/")[0] for key in healthy.episodes(ARTICLES)}
            span = (healthy.history.end - healthy.history.start) / 86400
            warnings = healthy.severity_episodes(OURS, "warning")
            criticals = healthy.severity_episodes(OURS, "critical")
            false_alerts += warnings + criticals
            warning_episodes += warnings
            fast_pages += healthy.episodes_of(OURS, RUNNING_OUT_ALERTS)
            print(
                f"{name} seed {seed}: {span:.0f} healthy days, {healthy.history.samples} samples, {healthy.wall_s:.0f}s"
            )
            print(f"  ours:     {warnings} warning and {criticals} critical episodes {healthy.episodes(OURS) or ''}")
            print(f"  articles: {sum(healthy.episodes(ARTICLES).values())} alerts {healthy.episodes(ARTICLES)}")

    figures = {}
    leads: dict[str, float | None] = {}
    for name, scenario in library.SCENARIOS.items():
        if name in library.healthy():
            continue
        outcome = run_scenario(name, days(name), resolution_s=args.resolution, step_s=args.step)
        ours = outcome.first(OURS)
        print(f"{name} ({outcome.wall_s:.0f}s): {scenario.title}")
        line = f"  ours:     {_fmt(ours)}"
        if ours:
            line += f" after {outcome.requests_after_leak(ours[0]):.0f} leaking requests"
        used = outcome.headroom_used(ours[0]) if ours and any(leak.target == "gpu" for leak in scenario.leaks) else None
        if used is not None:
            line += f" ({used:.0%} of the GPU headroom used)"
        if outcome.early(OURS):
            line += f"; before the leak: {', '.join(outcome.early(OURS))}"
        print(line)
        print(f"  articles (min after leak start): {_article_firsts(outcome, noisy)}")
        figures[name] = (ours, used)
        if name in library.fast_leaks():
            lead = outcome.fast_leak_lead_s()
            leads[name] = lead
            print(f"  first page before the memory runs out: {'none' if lead is None else f'{lead / 60:.0f} min'}")

    # GPU leaks starting at every hour of the day: detection counted in requests served.
    leak_requests: list[float] = []
    missed = []
    hours = QUICK_LEAK_HOURS if args.quick else library.LEAK_HOURS
    sizes = library.LEAK_SIZES_MB[:1] if args.quick else library.LEAK_SIZES_MB
    seeds = library.LEAK_SEEDS[:1] if args.quick else library.LEAK_SEEDS
    for size in sizes:
        for hour in hours:
            for seed in seeds:
                scenario = library.leak_at_hour(hour, size, seed)
                outcome = run_scenario(scenario.name, scenario=scenario, resolution_s=args.resolution, step_s=args.step)
                ours = outcome.first(OURS)
                fired = [r.rule.key for r in outcome.alerts(OURS) if r.fired]
                if ours is None:
                    missed.append(f"{scenario.name} seed {seed}")
                    print(f"{scenario.name} seed {seed}: none fired")
                    continue
                served = outcome.requests_after_leak(ours[0])
                leak_requests.append(served)
                print(
                    f"{scenario.name} seed {seed}: {_fmt(ours)} after {served:.0f} leaking requests; "
                    f"fired: {', '.join(fired)}; early: {', '.join(outcome.early(OURS)) or '-'}"
                )
    if leak_requests:
        print(
            f"GPU leaks at any hour: {len(leak_requests)} caught, {len(missed)} missed; leaking requests "
            f"to the first alert p50={percentile(leak_requests, 0.5):.0f} p90={percentile(leak_requests, 0.9):.0f} "
            f"max={max(leak_requests):.0f} (target <= {library.LEAK_REQUEST_TARGET})"
        )

    def minutes(name: str) -> str:
        first = figures.get(name, (None, None))[0]
        return "none" if first is None else f"{first[0] / 60:.0f}"

    p90 = "none" if missed or not leak_requests else f"{percentile(leak_requests, 0.9):.0f}"
    # The worst fast leak: `none` when one ran out of memory before any page.
    caught = [v for v in leads.values() if v is not None]
    worst_lead = "none" if len(caught) < len(leads) or not caught else f"{min(caught) / 60:.0f}"
    print(f"(* fires in the healthy history too.) bench-detection took {time.monotonic() - started:.0f}s")
    print(
        f"detection: article_a_vllm_min={minutes('article_a_vllm')} slow_leak_min={minutes('slow_leak')} "
        f"worker_rss_min={minutes('worker_rss_high_traffic')} "
        f"healthy_false_alerts={false_alerts} healthy_warning_episodes={warning_episodes} leak_requests_p90={p90} "
        f"fast_leak_lead_min={worst_lead} fast_leak_healthy_pages={fast_pages}"
    )
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
