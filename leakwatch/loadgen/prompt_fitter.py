"""Fitting a prompt to a token count: grow or trim its variable part until the tokenizer agrees.

The corpus samples a target length per prompt; the text sources (story prefixes, repository
context) are cut in characters. `PromptFitter` bridges the two with secant steps on a learnt
characters-per-token ratio, measuring each try with the server's tokenizer (chat template included),
so the kept prompt is within a percent of its target and never longer than the context leaves.
"""

from __future__ import annotations

from .tokens import TokenCounter


class PromptFitter:
    """Grows or trims the variable part of a prompt until the tokenizer says it has the target length."""

    def __init__(self, counter: TokenCounter, tolerance: float = 0.01, max_rounds: int = 6):
        self.counter = counter
        self.tolerance = tolerance
        self.max_rounds = max_rounds
        self.chars_per_token = 3.0  # first guess; learnt from every measurement

    def fit(self, render, target: int, limit_chars: int, ceiling: int | None = None) -> tuple[object, int]:
        """render(chars) -> content whose variable part has about `chars` characters (cut at a
        boundary); returns (content, measured tokens) closest to `target` and never above `ceiling`
        (the room the context leaves) unless even the fixed part is longer.

        Secant steps on the learnt characters-per-token ratio, kept inside a shrinking bracket.
        """
        content = render(0)
        base = self.counter.count(content)
        best = (content, base)
        if base >= target:
            return best
        if ceiling is not None:
            target = min(target, ceiling)
        lo, hi = 0, None  # characters known to give too few / too many tokens
        chars = min(limit_chars, round((target - base) * self.chars_per_token))
        for _ in range(self.max_rounds):
            content = render(chars)
            tokens = self.counter.count(content)
            fits = ceiling is None or tokens <= ceiling
            if fits and abs(tokens - target) < abs(best[1] - target):
                best = (content, tokens)
            if fits and abs(tokens - target) <= max(2, self.tolerance * target):
                break
            if tokens > base:
                self.chars_per_token = chars / (tokens - base)
            if tokens < target:
                if chars >= limit_chars:
                    break  # the source is exhausted: this is the longest prompt it makes
                lo = max(lo, chars)
            else:
                hi = chars if hi is None else min(hi, chars)
            guess = round((target - base) * self.chars_per_token)
            if guess <= lo:
                guess = lo + max(16, lo // 4)  # a cut at a boundary fell short: grow
            if hi is not None and guess >= hi:
                guess = (lo + hi) // 2
            guess = min(guess, limit_chars)
            if guess == chars:
                break
            chars = guess
        return best
