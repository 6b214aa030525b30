"""The two traffic profiles' length distributions: what a workload asks of the server, in tokens.

A `WorkloadSpec` pairs the input and output `LengthDistribution` of one traffic profile: creative
writing (Janeway-like models: input uniform ~200-800 tokens, output ~200-500) and code assistance
(IQuest-like models: input log-normal with median ~5K and p99 ~45K tokens, output median ~500).
Plain data and sampling, kept apart from the prompt text so the options parser, the corpus builder
and the benchmarks share one definition; `scipy_args` lets tests check samples against the brief.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from statistics import NormalDist

Z99 = NormalDist().inv_cdf(0.99)


@dataclass(frozen=True)
class LengthDistribution:
    """Token lengths: 'uniform' (low..high), 'lognormal' (median, p99) or 'fixed' (low)."""

    kind: str
    low: float = 0
    high: float = 0
    median: float = 0
    p99: float = 0

    @classmethod
    def uniform(cls, low: int, high: int) -> LengthDistribution:
        return cls("uniform", low=low, high=high)

    @classmethod
    def lognormal(cls, median: float, p99: float) -> LengthDistribution:
        if not 0 < median < p99:
            raise ValueError(f"a log-normal length needs 0 < median < p99 (got {median}, {p99})")
        return cls("lognormal", median=median, p99=p99)

    @classmethod
    def fixed(cls, tokens: int) -> LengthDistribution:
        return cls("fixed", low=tokens, high=tokens)

    @property
    def sigma(self) -> float:
        return math.log(self.p99 / self.median) / Z99

    def sample(self, rng: random.Random, scale: float = 1.0) -> int:
        if self.kind == "fixed":
            value = self.low
        elif self.kind == "uniform":
            value = rng.uniform(self.low, self.high)
        elif self.kind == "lognormal":
            value = rng.lognormvariate(math.log(self.median), self.sigma)
        else:
            raise ValueError(f"unknown length distribution {self.kind!r}")
        return max(1, round(value * scale))

    def scipy_args(self, scale: float = 1.0) -> tuple[str, tuple]:
        """(scipy.stats name, args) of the same distribution, for goodness-of-fit tests."""
        if self.kind == "uniform":
            return "uniform", (self.low * scale, (self.high - self.low) * scale)
        if self.kind == "lognormal":
            return "lognorm", (self.sigma, 0, self.median * scale)
        raise ValueError(f"no continuous form for {self.kind!r}")

    def describe(self, scale: float = 1.0) -> str:
        if self.kind == "uniform":
            return f"uniform {self.low * scale:g}-{self.high * scale:g}"
        if self.kind == "lognormal":
            return f"log-normal median {self.median * scale:g}, p99 {self.p99 * scale:g}"
        return f"fixed {self.low:g}"


@dataclass(frozen=True)
class WorkloadSpec:
    name: str
    input: LengthDistribution
    output: LengthDistribution


def fixed_lengths(input_tokens: int, output_tokens: int, name: str = "text") -> WorkloadSpec:
    """Plain text prompts of fixed lengths (the benchmark's like-for-like comparison with vLLM's client)."""
    return WorkloadSpec(name, LengthDistribution.fixed(input_tokens), LengthDistribution.fixed(output_tokens))


WORKLOADS = {
    "creative": WorkloadSpec("creative", LengthDistribution.uniform(200, 800), LengthDistribution.uniform(200, 500)),
    "code": WorkloadSpec("code", LengthDistribution.lognormal(5000, 45000), LengthDistribution.lognormal(500, 2000)),
}
