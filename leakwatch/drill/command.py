"""Leak drill: starts a private native stack with a known leak injected into the real vLLM, drives
the production-day profile time-compressed, and checks that the leak alert fires, Alertmanager
calls the healer, vLLM is drained and restarted, memory comes back, and `leakwatch check` recovers
the injected bytes per request (and says NO-LEAK for a control phase without injection).

Settings: config/drill.yaml. Before it reports the alert figure the drill checks it (which alert,
on which series, not sooner than the rule's windows allow, nothing during warm-up or the control
phase) and fails with the explanation otherwise. The last line printed is the benchmark summary,
with the recovery split by phase (leakwatch/drill/phases.py) and the machine's load:
    drill: alert_s=X recover_s=Y estimate_err_pct=Z escalate_s=.. notify_s=.. drain_s=.. stop_s=..
           start_s=.. ready_s=.. baseline_s=.. cpu_hogs=N load_max=L
"""

from __future__ import annotations

import argparse
import json

from . import drill_settings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        default=str(drill_settings.CONFIG_FILE),
        metavar="FILE",
        help="drill settings (default config/drill.yaml)",
    )
    parser.add_argument(
        "--fast-leak",
        action="store_true",
        help="the fast-leak variant (config/drill.yaml fast_leak): a leak from the first request that "
        "would exhaust vLLM's memory within the hour; HostMemoryRunningOut and the healer must act before "
        "the OOM killer",
    )
    parser.add_argument(
        "--canary",
        action="store_true",
        help="the canary drill (config/drill.yaml canary, docs/canary.md): a stable and a canary vLLM behind the "
        "router, one side leaking; `check --compare stable canary` must say which",
    )
    parser.add_argument(
        "--leaking-side",
        choices=("stable", "canary", "both"),
        default="both",
        help="with --canary: which side leaks (both: one run each way, default)",
    )
    parser.add_argument(
        "--scenario",
        metavar="NAME",
        default=None,
        help="drive one of vLLM's own leaks (config/vllm_leaks.yaml: a case name) with its real trigger, "
        "or `all` to screen every case (`make bench-realleaks`); prints the verdict per case",
    )
    parser.add_argument("--json", metavar="FILE", default=None, help="also write the full result as JSON")
    parser.add_argument("--keep-state", action="store_true", help="keep the drill's state dir (logs, TSDB)")
    parser.add_argument(
        "--cpu-hogs",
        type=int,
        default=0,
        metavar="N",
        help="the loaded variant: N busy processes beside the stack for the whole drill "
        "(bounded; `make bench-drill LOAD=1` uses 2)",
    )


def run(args: argparse.Namespace) -> int:
    from ..core.errors import LeakwatchError
    from ..core.shutdown import unwind_on_sigterm
    from .orchestrator import Drill

    unwind_on_sigterm()  # the drill's private stack is stopped on the way out

    if args.cpu_hogs < 0:
        raise LeakwatchError(f"--cpu-hogs must be 0 or more, not {args.cpu_hogs}")
    cfg = drill_settings.load(args.config)
    if sum(bool(x) for x in (args.canary, args.fast_leak, args.scenario)) > 1:
        raise LeakwatchError("--canary, --fast-leak and --scenario are separate drills; run them one at a time")
    if args.scenario:
        return run_real_leaks(args, cfg)
    if args.canary:
        return run_canary(args, cfg)
    if args.leaking_side != "both":
        raise LeakwatchError("--leaking-side is for the canary drill: add --canary")
    drill: Drill
    if args.fast_leak:
        from .fast_leak import FastLeakDrill

        drill = FastLeakDrill(cfg.as_fast_leak(), keep_state=args.keep_state, cpu_hogs=args.cpu_hogs)
    else:
        drill = Drill(cfg, keep_state=args.keep_state, cpu_hogs=args.cpu_hogs)
    result = drill.run()
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result.__dict__, fh, indent=1, default=str)
    est = result.estimate_bytes_per_request
    if args.fast_leak:
        print(f"OOM kills in vLLM's cgroup: {result.oom_kills}")
    else:
        print(f"control phase: {result.control.get('verdict', 'n/a')}")
        print(
            f"leak phase: {result.leak.get('verdict', 'n/a')}, estimate "
            f"{'n/a' if est is None else f'{est:.0f}'} B/request for {result.injected_bytes_per_request} injected"
        )
    print(f"restarts by the healer: {result.restarts} (alerts it received: {result.notifications})")
    attribution = result.attribution
    if attribution.get("labels"):
        print(
            f"leak alert: {attribution['alert']} on {attribution['labels']} after {result.alert_s:.1f}s "
            f"(the rule allows no earlier than {attribution['earliest_s']:.1f}s)"
        )
    if result.phases_summary:
        print(f"recovery by phase: {result.phases_summary}")
    for failure in result.failures:
        print(f"FAILED: {failure}")
    print("PASSED" if result.passed else "FAILED")
    print(result.summary_line())
    return 0 if result.passed else 1


def run_canary(args: argparse.Namespace, cfg: drill_settings.DrillConfig) -> int:
    from .canary import CanaryDrill, summary_line
    from .drill_settings import LEAK_ALERT

    sides = ("stable", "canary") if args.leaking_side == "both" else (args.leaking_side,)
    results = []
    for side in sides:
        result = CanaryDrill(cfg.as_canary(), side, keep_state=args.keep_state, cpu_hogs=args.cpu_hogs).run_canary()
        results.append(result)
        share = result.canary_share
        print(
            f"{side} side leaking: verdict {result.verdict or 'n/a'} (expected {result.expected}), canary share "
            f"{'n/a' if share is None else f'{share:.1%}'} of {sum(result.requests.values()):.0f} requests, "
            f"right verdict after {'n/a' if result.requests_to_verdict is None else f'{result.requests_to_verdict:.0f}'} "
            "requests"
        )
        for name in ("stable", "canary"):
            est, err, alert = result.estimate.get(name), result.err_pct.get(name), result.alert_s.get(name)
            print(
                f"  {name}: {'n/a' if est is None else f'{est:.0f}'} B/request (error {'n/a' if err is None else f'{err:.1f}'}% "
                f"of the injected), {LEAK_ALERT} {'not fired' if alert is None else f'fired after {alert:.0f}s'}"
            )
        for failure in result.failures:
            print(f"FAILED: {failure}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump([r.__dict__ for r in results], fh, indent=1, default=str)
    passed = all(r.passed for r in results)
    print("PASSED" if passed else "FAILED")
    print(summary_line(results))
    return 0 if passed else 1


def run_real_leaks(args: argparse.Namespace, cfg: drill_settings.DrillConfig) -> int:
    """vLLM's own leaks on the real server (leakwatch.drill.real_leaks): one case, or all of them."""
    import dataclasses

    from ..realleaks import catalogue as leak_catalogue
    from .real_leaks import RealLeakDrill, summary_line

    catalogue = leak_catalogue.load()
    cases = list(catalogue.cases) if args.scenario == "all" else [catalogue.case(args.scenario)]
    for case in cases:
        if not case.screened:
            print(f"not screened: {case.name} ({case.status}): {case.note or 'no trigger reaches it over HTTP'}")
    if not any(case.screened for case in cases):
        return 0
    # Wall-clock speed: triggers go out as fast as vLLM answers; check judges in production hours.
    screening_cfg = dataclasses.replace(cfg, time_compression=1.0)
    drill = RealLeakDrill(screening_cfg, catalogue, cases, keep_state=args.keep_state, cpu_hogs=args.cpu_hogs)
    results = drill.screen()
    if args.json:
        with open(args.json, "w") as fh:
            json.dump([dataclasses.asdict(r) for r in results], fh, indent=1, default=str)
    failures = [f for r in results for f in r.failures]
    for failure in failures:
        print(f"FAILED: {failure}")
    print("PASSED" if not failures else "FAILED")
    print(summary_line(results))
    for result in results:
        print(result.line())
    return 0 if not failures else 1
