"""Derived state across scrapes: restarts, the post-warm-up baseline and the retention ratio.

Baseline. vLLM preallocates its KV pool and warms up caches on its first requests, so absolute memory
says little about a leak. The baseline is the memory at the first sample where vLLM is healthy, has
served at least `warmup_requests` since it started, and has no request in flight (so in-flight
working memory is not part of it); a server that is never idle gets its baseline anyway
`baseline_idle_wait_s` after warm-up. A new API server process (vLLM restarted) drops the baseline and
the process counts as a restart; vLLM disappearing drops it too.

Growth per request = (memory now - memory at baseline) / requests served since the baseline, with
host memory measured as anonymous memory + swap per role (a leak pushed to swap still shows; file
pages the kernel drops and faults back in do not) and GPU memory as the device's used memory.

Retention ratio (the articles' vram_retention_ratio, also computed for host memory per role). A burst
starts at the first sample with a request in flight or the request or token counters advanced;
"before" is the lowest memory of the idle samples since the last burst. The burst ends at the first
sample with nothing in flight and no counter advanced; once vLLM has stayed idle for
`retention_idle_s`:

    retention = (memory idle after - memory before) / (peak during the burst - memory before)

clamped to [0, 1]: 0 when everything taken during the burst was given back, 1 when all of it is still
held. A burst whose gain (peak - before) is below `min_gain_bytes` leaves the ratio unchanged, since
a ratio of noise means nothing; so does a burst no sample fell inside (it started and ended between
two samples, so its peak is unknown). A sample is inside when it saw requests in flight, or when the
burst was busy at it and again at a later sample (requests finished before it and after it): vLLM's
running/waiting gauges come from its engine's last step and read 0 between the steps of short
requests, so with a fast model most samples of a busy server see nothing in flight. The peak is the
highest sampled value: sample often enough (the exporter samples every few seconds between scrapes)
for bursts to be seen.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from .vllm_scrape import VllmStats

MemoryKey = tuple[str, str]  # ("host", role) or ("gpu", device index)


@dataclass(frozen=True)
class Sample:
    time: float
    identity: tuple[int, int] | None  # the vLLM API server process; None when none was found
    vllm: VllmStats | None  # None when vLLM's /metrics could not be read
    healthy: bool
    host: dict[str, int] | None  # role -> anonymous memory + swap; None when unreadable this time
    gpu: dict[str, int] | None  # device -> used bytes; None without GPU or unreadable

    def memory(self) -> dict[MemoryKey, int]:
        values = {("host", role): value for role, value in (self.host or {}).items()}
        values.update({("gpu", gpu): value for gpu, value in (self.gpu or {}).items()})
        return values


@dataclass(frozen=True)
class Baseline:
    time: float
    requests: float
    host: dict[str, int]
    gpu: dict[str, int]


@dataclass
class _Burst:
    before: dict[MemoryKey, int]
    peak: dict[MemoryKey, int]
    sampled_inside: bool = False  # a sample fell inside the burst: its peak was seen
    busy_samples: int = 0
    idle_since: float | None = None


@dataclass
class Retention:
    idle_s: float
    min_gain_bytes: int
    ratios: dict[MemoryKey, float] = field(default_factory=dict)
    rated_bursts: int = 0  # bursts that produced at least one ratio; a counter, kept across resets
    _idle_memory: dict[MemoryKey, int] | None = None
    _burst: _Burst | None = None

    def reset(self) -> None:
        self.ratios.clear()
        self._idle_memory = None
        self._burst = None

    def update(self, now: float, busy: bool, in_flight: bool, memory: dict[MemoryKey, int]) -> None:
        burst = self._burst
        if busy:
            if burst is None:
                if self._idle_memory is None:
                    return  # no idle sample before this burst: nothing to compare with
                burst = self._burst = _Burst(dict(self._idle_memory), dict(self._idle_memory))
            burst.idle_since = None
            burst.busy_samples += 1
            # The second busy sample proves the first had requests finish before and after it.
            burst.sampled_inside |= in_flight or burst.busy_samples >= 2
            self._raise_peak(burst, memory)
            return
        if burst is None:
            # The lowest idle reading since the last burst: a sample that took a burst's first
            # requests for idle (none finished yet, the engine gauges between steps) must not
            # become the memory the burst is measured from.
            last = self._idle_memory or {}
            self._idle_memory = {key: min(value, last.get(key, value)) for key, value in memory.items()}
            return
        self._raise_peak(burst, memory)  # memory can still climb as the last responses finish
        if burst.idle_since is None:
            burst.idle_since = now
        if now - burst.idle_since < self.idle_s:
            return
        if burst.sampled_inside:
            rated = False
            for key, before in burst.before.items():
                if key not in memory:
                    continue
                gain = burst.peak[key] - before
                if gain > 0 and gain >= self.min_gain_bytes:
                    self.ratios[key] = min(1.0, max(0.0, (memory[key] - before) / gain))
                    rated = True
            self.rated_bursts += rated
        self._burst = None
        self._idle_memory = memory

    @staticmethod
    def _raise_peak(burst: _Burst, memory: dict[MemoryKey, int]) -> None:
        for key, value in memory.items():
            if key in burst.peak:
                burst.peak[key] = max(burst.peak[key], value)


# The exporter's tuning defaults (ExporterConfig and the CLI read these; docs/exporter.md explains them).
WARMUP_REQUESTS = 10  # requests served since vLLM started before a baseline is taken
BASELINE_IDLE_WAIT_S = 60.0
RETENTION_IDLE_S = 30.0
RETENTION_MIN_GAIN_BYTES = 8 << 20


class DerivedState:
    def __init__(
        self,
        warmup_requests: int = WARMUP_REQUESTS,
        baseline_idle_wait_s: float = BASELINE_IDLE_WAIT_S,
        retention_idle_s: float = RETENTION_IDLE_S,
        retention_min_gain_bytes: int = RETENTION_MIN_GAIN_BYTES,
    ):
        self.warmup_requests = warmup_requests
        self.baseline_idle_wait_s = baseline_idle_wait_s
        self.retention = Retention(retention_idle_s, retention_min_gain_bytes)
        self.restarts = 0
        self.baseline: Baseline | None = None
        self._identity: tuple[int, int] | None = None
        self._warm_since: float | None = None
        self._last_requests: float | None = None
        self._last_tokens: float | None = None

    def _reset(self) -> None:
        self.baseline = None
        self._warm_since = None
        self._last_requests = None
        self._last_tokens = None
        self.retention.reset()

    def update(self, sample: Sample) -> None:
        if sample.identity is None:
            if self.baseline is not None or self._warm_since is not None:
                self._reset()  # vLLM is gone: its baseline described processes that no longer exist
            return
        if self._identity is not None and sample.identity != self._identity:
            self.restarts += 1
            self._reset()
        self._identity = sample.identity
        if sample.vllm is None:
            return  # cannot tell requests or idleness this time
        requests = sample.vllm.requests_served
        if self._last_requests is not None and requests < self._last_requests:
            self._reset()  # the counter went back: a restart this exporter did not see as one
        tokens = sample.vllm.tokens_processed
        busy = (
            sample.vllm.in_flight > 0
            or (self._last_requests is not None and requests > self._last_requests)
            or (self._last_tokens is not None and tokens > self._last_tokens)
        )
        self._last_requests, self._last_tokens = requests, tokens
        self._maybe_take_baseline(sample, requests)
        self.retention.update(sample.time, busy, sample.vllm.in_flight > 0, sample.memory())

    def _maybe_take_baseline(self, sample: Sample, requests: float) -> None:
        if self.baseline is not None or not sample.healthy or not sample.host:
            return
        if requests < self.warmup_requests:
            return
        if self._warm_since is None:
            self._warm_since = sample.time
        idle = sample.vllm.in_flight == 0
        if idle or sample.time - self._warm_since >= self.baseline_idle_wait_s:
            self.baseline = Baseline(sample.time, requests, dict(sample.host), dict(sample.gpu or {}))

    # -- persistence: the restart count and the baseline outlive an exporter restart ----------------
    # (In compose the exporter lives in vLLM's PID namespace, so a vLLM container restart restarts the
    # exporter too; without this it would start from zero and never count that restart.)

    def state(self) -> dict:
        return {
            "identity": list(self._identity) if self._identity else None,
            "restarts": self.restarts,
            "baseline": asdict(self.baseline) if self.baseline else None,
        }

    def restore(self, state: dict) -> None:
        """The next sample decides: the same vLLM keeps its baseline, another one is a restart."""
        self.restarts = int(state["restarts"])
        self._identity = tuple(state["identity"]) if state["identity"] else None
        self.baseline = Baseline(**state["baseline"]) if state["baseline"] and self._identity else None

    def requests_since_baseline(self, sample: Sample) -> float | None:
        if self.baseline is None or sample.vllm is None:
            return None
        return sample.vllm.requests_served - self.baseline.requests
