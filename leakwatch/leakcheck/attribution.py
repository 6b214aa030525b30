"""Which requests a leak grows with: bytes per triggering request, per HTTP endpoint.

vLLM's real leaks grow on a fraction of the requests only (the Responses API's store grows with
POST /v1/responses, not with chat completions), so bytes per request served understates them and
does not say what to avoid. vLLM's /metrics carries prometheus-fastapi-instrumentator's
`http_requests_total{handler, method, status}` (status grouped as "2xx"); for every series the check
calls LEAK, its memory is fitted against each endpoint's successful POSTs on the same grid:

  1. endpoints whose counter moved by fewer than `min_requests` in the analysed points are skipped;
  2. each remaining endpoint's fit (Theil-Sen within segments, estimator.py) leaves residuals; the
     candidate is the endpoint with a bytes/request interval above min_bytes_per_request whose
     residuals scatter least (median absolute residual);
  3. it explains the growth only if, with each rival accounted for (every other growing endpoint,
     and time), its counter still explains growth: a Frisch-Waugh-Lovell partial slope (memory's
     residuals after the rival's fit against the candidate counter's residuals after the same fit)
     whose interval lies above the threshold; otherwise the data cannot tell them apart;
  4. each other endpoint is then judged by its partial slope on what the candidate leaves: below
     the threshold (it does not explain it), above (it grows too), else undecided; and time: residuals that still grow per hour above min_growth_bytes_per_hour mean part of the
     growth follows no endpoint's requests.
docs/leak-check.md has the method and its limits (endpoints whose traffic moves in lockstep cannot be
told apart; the answer then says so).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..core import alert_config
from ..core.metric_catalogue import with_matcher
from ..core.promapi import Prometheus
from .analysis import human_bytes as _b
from .estimator import Interval, SlopeFit, theil_sen
from .verdict_thresholds import CheckConfig

# Successful POSTs per handler, from vLLM's own scrape job (the selector the rules use).
ENDPOINT_REQUESTS = (
    f'sum by (handler) (http_requests_total{{{alert_config.load().selector("vllm")}, method="POST", status=~"2.."}})'
)
METHOD = "POST"

EXPLAINS, ALSO_GROWS, DOES_NOT, UNDECIDED, TOGETHER = (
    "explains",
    "also grows",
    "does not explain",
    "undecided",
    "moved together",
)


def queries() -> list[str]:
    """The PromQL attribution runs (the metric-name contract test reads it)."""
    return [ENDPOINT_REQUESTS]


def collect_endpoints(
    prom: Prometheus, start: float, end: float, step: float, matcher: str = ""
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """handler -> (times, successful POSTs so far) on the check's grid."""
    out = {}
    for item in prom.query_range(with_matcher(ENDPOINT_REQUESTS, matcher), start, end, step):
        handler = item["metric"].get("handler", "")
        if not handler:
            continue
        values = np.array([[float(t), float(v)] for t, v in item["values"]])
        out[handler] = (values[:, 0], values[:, 1])
    return out


@dataclass
class EndpointFit:
    endpoint: str  # "POST /v1/responses"
    requests: float  # served in the analysed points
    bytes_per_request: Interval | None = None  # its own fit of memory against its counter
    verdict: str = ""  # explains | also grows | does not explain | undecided | moved together
    # The slope of the chosen endpoint's residuals against this endpoint's counter.
    residual_bytes_per_request: Interval | None = None

    def as_dict(self) -> dict:
        return {
            "endpoint": self.endpoint,
            "requests": self.requests,
            "verdict": self.verdict,
            "bytes_per_request": None if self.bytes_per_request is None else self.bytes_per_request.as_dict(),
            "residual_bytes_per_request": None
            if self.residual_bytes_per_request is None
            else self.residual_bytes_per_request.as_dict(),
        }


@dataclass
class Attribution:
    endpoint: str | None  # the endpoint whose requests explain the growth; None: none does
    bytes_per_request: Interval | None  # per triggering request on that endpoint
    reason: str
    endpoints: list[EndpointFit] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # endpoints whose counters did not move
    unexplained_growth_per_hour: Interval | None = None  # what the endpoint's fit leaves, against time

    def as_dict(self) -> dict:
        return {
            "endpoint": self.endpoint,
            "bytes_per_request": None if self.bytes_per_request is None else self.bytes_per_request.as_dict(),
            "reason": self.reason,
            "endpoints": [e.as_dict() for e in self.endpoints],
            "skipped": self.skipped,
            "unexplained_growth_per_hour": None
            if self.unexplained_growth_per_hour is None
            else self.unexplained_growth_per_hour.as_dict(),
        }


def _aligned(t: np.ndarray, counter: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """The counter at the series' analysed times (nan where it has no sample)."""
    index = {round(float(x), 3): float(v) for x, v in zip(*counter)}
    return np.array([index.get(round(float(x), 3), math.nan) for x in t])


def _served(counts: np.ndarray, seg: np.ndarray) -> float:
    total = 0.0
    for s in np.unique(seg):
        c = counts[(seg == s) & np.isfinite(counts)]
        if len(c):
            total += float(c.max() - c.min())
    return total


def _residuals(fit: SlopeFit, x: np.ndarray, y: np.ndarray, seg: np.ndarray) -> np.ndarray:
    intercepts = dict(fit.intercepts)
    base = np.array([intercepts.get(int(s), math.nan) for s in seg])
    return y - base - fit.slope.estimate * x


def _partial(x: np.ndarray, given: np.ndarray, memory_left: np.ndarray, seg: np.ndarray, cfg: CheckConfig) -> Interval:
    """The slope of memory against `x` once `given` is accounted for (Frisch-Waugh-Lovell, with
    Theil-Sen fits): `memory_left` (memory's residuals after its fit on `given`) against x's own
    residuals after a fit on `given`. Counters that moved in lockstep leave x nothing to vary, and
    the interval comes out unbounded or straddling: the data cannot separate them."""
    on_given = theil_sen(given, x, seg, cfg.confidence)
    if not on_given.ok:
        return theil_sen(x, memory_left, seg, cfg.confidence).slope
    fit = theil_sen(_residuals(on_given, given, x, seg), memory_left, seg, cfg.confidence)
    return fit.slope if fit.ok else Interval(math.nan, -math.inf, math.inf)


def _scatter(residuals: np.ndarray) -> float:
    finite = residuals[np.isfinite(residuals)]
    return float(np.median(np.abs(finite - np.median(finite)))) if len(finite) else math.inf


def attribute(
    t: np.ndarray,
    memory: np.ndarray,
    seg: np.ndarray,
    counters: dict[str, tuple[np.ndarray, np.ndarray]],
    cfg: CheckConfig,
    time_compression: float = 1.0,
) -> Attribution:
    """Which endpoint's successful POSTs explain the growth of `memory` (post-warm-up points, their
    segments), and the bytes per request on it."""
    t_req, t_hour = cfg.min_bytes_per_request, cfg.min_growth_bytes_per_hour
    per_hour = 3600.0 / time_compression
    moving: dict[str, np.ndarray] = {}
    skipped = []
    served = {}
    for handler, counter in sorted(counters.items()):
        counts = _aligned(t, counter)
        served[handler] = _served(counts, seg)
        if served[handler] >= max(cfg.min_requests, 1):
            moving[handler] = counts
        else:
            skipped.append(f"{METHOD} {handler}")
    if not moving:
        return Attribution(None, None, "no endpoint served enough POSTs in the window to fit against", [], skipped)

    fits = {h: theil_sen(c, memory, seg, cfg.confidence) for h, c in moving.items()}
    residuals = {h: _residuals(f, moving[h], memory, seg) for h, f in fits.items() if f.ok}
    time_fit = theil_sen(t, memory, seg, cfg.confidence)
    time_residuals = _residuals(time_fit, t, memory, seg) if time_fit.ok else None
    growing = [h for h in residuals if fits[h].slope.low > t_req]
    results = {h: EndpointFit(f"{METHOD} {h}", served[h], fits[h].slope if fits[h].ok else None) for h in moving}
    ordered = lambda best: [results[best]] + [results[h] for h in sorted(results) if h != best]  # noqa: E731
    if not growing:
        for r in results.values():
            r.verdict = DOES_NOT
        return Attribution(
            None,
            None,
            "no endpoint's requests explain it: no endpoint's bytes/request interval lies above "
            f"{_b(t_req)} (growth unrelated to requests, or too little traffic to tell)",
            list(results.values()),
            skipped,
        )
    best = min(growing, key=lambda h: _scatter(residuals[h]))
    # Tell the candidate apart from every other explanation: what the other leaves must still grow
    # with the candidate's requests.
    rivals = []
    for h, left_h in residuals.items():
        if (
            h != best
            and fits[h].slope.low > t_req
            and not _partial(moving[best], moving[h], left_h, seg, cfg).low > t_req
        ):
            rivals.append(h)
    if time_residuals is not None and not _partial(moving[best], t, time_residuals, seg, cfg).low > t_req:
        rivals.append("")  # time: steady traffic grows like the clock
    left = residuals[best]
    hours = sum(float(t[seg == s_].max() - t[seg == s_].min()) for s_ in np.unique(seg)) * time_compression / 3600.0
    for h in moving:
        if h == best:
            results[h].verdict = EXPLAINS
            continue
        on_left = _partial(moving[h], moving[best], left, seg, cfg)
        results[h].residual_bytes_per_request = on_left
        # The check's per-request threshold at this endpoint's traffic: less per request than
        # min_growth_bytes_per_hour / (its requests per hour) is too slow to matter.
        t_h = max(t_req, t_hour / (served[h] / hours)) if hours > 0 and served[h] > 0 else t_req
        if h in rivals:
            results[h].verdict = TOGETHER
        elif on_left.low > t_h:
            results[h].verdict = ALSO_GROWS
        elif on_left.high < t_h:
            results[h].verdict = DOES_NOT
        else:
            results[h].verdict = UNDECIDED
    unexplained = _partial(t, moving[best], left, seg, cfg)
    unexplained_gph = unexplained.scaled(per_hour) if math.isfinite(unexplained.estimate) else None
    bpr = fits[best].slope
    endpoint = f"{METHOD} {best}"
    figure = f"{_b(bpr.estimate)} per request ({int(round(cfg.confidence * 100))}% CI {_b(bpr.low)} .. {_b(bpr.high)})"
    if "" in rivals and time_residuals is not None and _scatter(time_residuals) < _scatter(residuals[best]):
        gph = time_fit.slope.scaled(per_hour)
        return Attribution(
            None,
            None,
            f"no endpoint's requests explain it: it follows time ({_b(gph.estimate)}/h) more closely than any "
            f"endpoint's requests (best {endpoint}), and those do not explain it beyond time",
            ordered(best),
            skipped,
            unexplained_gph,
        )
    if rivals:
        names = [f"{METHOD} {h}" for h in rivals if h] + (["time"] if "" in rivals else [])
        return Attribution(
            None,
            bpr,
            f"grows with {endpoint} ({figure}), but cannot tell it apart from {', '.join(names)}: their traffic "
            "moved together in this window (a window where the mix of requests varies would decide)",
            ordered(best),
            skipped,
            unexplained_gph,
        )
    others = [r for h, r in results.items() if h != best]
    if not others:
        tail = "no other endpoint served POSTs"
    elif all(r.verdict == DOES_NOT for r in others):
        tail = "other endpoints' requests do not explain it"
    else:
        tail = "; ".join(f"{r.endpoint}: {r.verdict}" for r in others)
    if unexplained_gph is not None and unexplained_gph.low > t_hour:
        tail += f"; beyond that it still grows {_b(unexplained_gph.estimate)}/h with time"
    return Attribution(
        endpoint, bpr, f"grows with {endpoint}: {figure}; {tail}", ordered(best), skipped, unexplained_gph
    )
