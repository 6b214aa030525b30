"""Prompt corpora for the two workloads, generated deterministically offline and fitted in tokens.

- creative writing (Janeway-like models): a story-continuation request, input ~200-800 tokens,
  output ~200-500 tokens;
- code assistance (IQuest-like models): a question about a repository whose source is pasted as
  context, input log-normal with median ~5K and p99 ~45K tokens, output median ~500 tokens. The
  context of one repository always starts the same way, so requests about the same repository share
  a long prefix (what vLLM's prefix cache serves in production).

The lengths come from .workloads, the stories from .story_text (a small seeded grammar), the code
from .code_context (the running interpreter's standard library); each prompt's length is fitted to
its sampled target by .prompt_fitter with the server's tokenizer (chat template included) and the
measured count is kept in a .prompt_record Prompt. Targets are clamped so prompt + output fit the served model's context (the demo model
has 2048 positions); `scale` shrinks the input distribution for small models; clamps are counted.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from .code_context import (
    CODE_SYSTEM,
    QUESTIONS,
    RepositoryContext,
    available_repositories,
    choose_repository,
    question_about,
)
from .prompt_fitter import PromptFitter
from .prompt_record import Prompt
from .story_text import CREATIVE_SYSTEM, StoryText, continuation_instruction
from .tokens import TokenCounter
from .workloads import WorkloadSpec


@dataclass
class CorpusStats:
    prompts: int = 0
    input_clamped: int = 0
    output_clamped: int = 0
    prompt_tokens: list[int] = field(default_factory=list)

    def summary(self, workload: str, counter: TokenCounter, max_model_len: int | None) -> str:
        toks = sorted(self.prompt_tokens) or [0]
        line = (
            f"{workload} corpus: {self.prompts} prompts, prompt tokens median {toks[len(toks) // 2]}, "
            f"max {toks[-1]} (measured with {counter.description})"
        )
        if self.input_clamped or self.output_clamped:
            line += (
                f"; to fit max_model_len {max_model_len}: {self.input_clamped} prompts and "
                f"{self.output_clamped} outputs were shortened"
            )
        return line


class CorpusBuilder:
    def __init__(
        self,
        spec: WorkloadSpec,
        counter: TokenCounter,
        *,
        api: str = "chat",
        seed: int = 0,
        scale: float = 1.0,
        output_scale: float = 1.0,
        max_model_len: int | None = None,
        max_output_tokens: int | None = None,
    ):
        if scale <= 0 or output_scale <= 0:
            raise ValueError(f"length scales must be positive, not {scale} / {output_scale}")
        self.output_scale = output_scale
        self.spec = spec
        self.counter = counter
        self.api = api
        self.seed = seed
        self.scale = scale
        self.max_model_len = max_model_len
        # Half the context for output at most, so a long output never leaves no room for a prompt.
        cap = max_model_len // 2 if max_model_len else None
        self.max_output_tokens = min(x for x in (max_output_tokens, cap, 10**9) if x)
        self.fitter = PromptFitter(counter)
        self.stats = CorpusStats()
        self._contexts: dict[str, RepositoryContext] = {}

    def _content(self, system: str, user: str):
        if self.api == "chat":
            return [{"role": "system", "content": system}, {"role": "user", "content": user}]
        return f"{system}\n\n{user}\n\n"

    def build(self, count: int) -> list[Prompt]:
        rng = random.Random(f"{self.spec.name}:{self.seed}")
        return [self.one(rng) for _ in range(count)]

    def one(self, rng: random.Random) -> Prompt:
        target = self.spec.input.sample(rng, self.scale)
        output = self.spec.output.sample(rng, self.output_scale)
        out_clamped = output > self.max_output_tokens
        output = min(output, self.max_output_tokens)
        max_input = self.max_model_len - output if self.max_model_len else None
        in_clamped = bool(max_input and target > max_input)
        goal = min(target, max_input) if max_input else target
        if self.spec.name == "code":
            content, tokens, repo = self._code(rng, goal, max_input)
        elif self.spec.name == "text":
            (content, tokens), repo = self._text(rng, goal, max_input), None
        else:
            (content, tokens), repo = self._creative(rng, goal, max_input), None
        if max_input and tokens > max_input:
            in_clamped = True  # the fixed part alone is longer than the room left
        self.stats.prompts += 1
        self.stats.input_clamped += in_clamped
        self.stats.output_clamped += out_clamped
        self.stats.prompt_tokens.append(tokens)
        return Prompt(self.spec.name, content, tokens, target, output, in_clamped, out_clamped, repo)

    def _creative(self, rng: random.Random, goal: int, ceiling: int | None):
        instruction = continuation_instruction(rng)
        story = StoryText(rng.random())

        def render(chars: int):
            return self._content(CREATIVE_SYSTEM, f"{instruction}\n\nThe story so far:\n\n{story.prefix(chars)}")

        return self.fitter.fit(render, goal, limit_chars=goal * 50, ceiling=ceiling)

    def _text(self, rng: random.Random, goal: int, ceiling: int | None):
        """Plain story text and nothing else (a like-for-like prompt for benchmark clients)."""
        story = StoryText(rng.random())

        def render(chars: int):
            text = story.prefix(chars) or "Once"
            return text if self.api == "completions" else [{"role": "user", "content": text}]

        return self.fitter.fit(render, goal, limit_chars=goal * 50, ceiling=ceiling)

    def _code(self, rng: random.Random, goal: int, ceiling: int | None):
        repos = available_repositories()
        repo = choose_repository(rng, repos)
        context = self._contexts.setdefault(repo, RepositoryContext(repo, repos))
        template = rng.choice(QUESTIONS)
        pick = rng.random()

        def render(chars: int):
            text = context.text(chars)
            question = question_about(template, pick, text, repo)
            return self._content(CODE_SYSTEM, f"Repository `{repo}`:\n\n{text}\nQuestion: {question}")

        content, tokens = self.fitter.fit(render, goal, limit_chars=context.size + 10000, ceiling=ceiling)
        return content, tokens, repo
