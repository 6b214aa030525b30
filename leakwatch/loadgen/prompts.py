"""Prompt corpora for the two workloads, generated deterministically offline and fitted in tokens.

- creative writing (Janeway-like models): a story-continuation request, input ~200-800 tokens,
  output ~200-500 tokens;
- code assistance (IQuest-like models): a question about a repository whose source is pasted as
  context, input log-normal with median ~5K and p99 ~45K tokens, output median ~500 tokens. The
  context of one repository always starts the same way, so requests about the same repository share
  a long prefix (what vLLM's prefix cache serves in production).

The code comes from the Python standard library of the running interpreter (real source, on every
machine, nothing downloaded); stories come from a small seeded grammar. Each prompt's length is
fitted to its sampled target with the server's tokenizer (chat template included) and the measured
count is kept. Targets are clamped so prompt + output fit the served model's context (the demo model
has 2048 positions); `scale` shrinks the input distribution for small models; clamps are counted.
"""

from __future__ import annotations

import json
import math
import random
import re
import sysconfig
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path
from statistics import NormalDist

from .tokens import TokenCounter

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


@dataclass
class Prompt:
    workload: str
    content: list | str  # chat messages, or the prompt string for /v1/completions
    prompt_tokens: int  # measured with the tokenizer (chat template included)
    target_tokens: int  # what the distribution asked for (after scale, before the clamp)
    output_tokens: int  # max_tokens of the request
    input_clamped: bool = False
    output_clamped: bool = False
    repo: str | None = None  # code: the repository whose context leads the prompt

    @property
    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "\n\n".join(str(m["content"]) for m in self.content)

    def to_json(self) -> str:
        """One line of a prompts file; `prompt` and `output_tokens` are vLLM's custom-dataset fields."""
        row = {"prompt": self.text, "output_tokens": self.output_tokens}
        row.update({k: v for k, v in asdict(self).items() if k not in ("content", "output_tokens")})
        if not isinstance(self.content, str):
            row["messages"] = self.content
        return json.dumps(row)


# -- text sources -------------------------------------------------------------------------------------

_NAMES = (
    "Ada",
    "Bram",
    "Celeste",
    "Dorian",
    "Esme",
    "Fenwick",
    "Galen",
    "Hesper",
    "Isolde",
    "Jory",
    "Kestrel",
    "Lysander",
    "Mira",
    "Nyx",
    "Orrin",
    "Perrin",
    "Quilla",
    "Rowan",
    "Sable",
    "Tamsin",
)
_PLACES = (
    "the lighthouse",
    "the salt marsh",
    "the clockmaker's shop",
    "the frozen harbour",
    "the library",
    "the orbital station",
    "the desert caravan",
    "the flooded city",
    "the mountain pass",
    "the night market",
)
_ADJECTIVES = (
    "quiet",
    "ancient",
    "restless",
    "silver",
    "forgotten",
    "burning",
    "hollow",
    "gentle",
    "crooked",
    "luminous",
    "bitter",
    "patient",
    "storm-dark",
    "velvet",
    "shattered",
    "distant",
)
_NOUNS = (
    "lantern",
    "letter",
    "map",
    "engine",
    "garden",
    "bell",
    "compass",
    "mirror",
    "river",
    "song",
    "promise",
    "door",
    "machine",
    "feather",
    "key",
    "tide",
    "signal",
    "window",
)
_VERBS = (
    "carried",
    "found",
    "buried",
    "followed",
    "repaired",
    "remembered",
    "hid",
    "opened",
    "traded",
    "watched",
    "answered",
    "broke",
    "stole",
    "painted",
    "guarded",
    "sold",
)
_FEELINGS = ("hope", "dread", "curiosity", "grief", "relief", "wonder", "anger", "longing")
_GENRES = ("fantasy", "science fiction", "mystery", "historical", "gothic", "adventure", "fable")
_STYLES = ("lyrical", "terse", "humorous", "suspenseful", "dreamlike", "plain-spoken")


def story_paragraphs(rng: random.Random):
    """Endless English-like paragraphs from a seeded grammar (no text corpus to ship or download)."""
    while True:
        sentences = []
        for _ in range(rng.randint(3, 7)):
            name, other = rng.sample(_NAMES, 2)
            pattern = rng.randrange(4)
            if pattern == 0:
                sentences.append(
                    f"{name} {rng.choice(_VERBS)} the {rng.choice(_ADJECTIVES)} "
                    f"{rng.choice(_NOUNS)} near {rng.choice(_PLACES)}."
                )
            elif pattern == 1:
                sentences.append(
                    f"In {rng.choice(_PLACES)}, {name} felt {rng.choice(_FEELINGS)} when "
                    f"{other} {rng.choice(_VERBS)} a {rng.choice(_NOUNS)}."
                )
            elif pattern == 2:
                sentences.append(
                    f'"Where is the {rng.choice(_NOUNS)}?" {name} asked, and {other} '
                    f"only {rng.choice(_VERBS)} the {rng.choice(_ADJECTIVES)} {rng.choice(_NOUNS)}."
                )
            else:
                sentences.append(
                    f"The {rng.choice(_ADJECTIVES)} {rng.choice(_NOUNS)} had been "
                    f"{rng.choice(_VERBS)} long before {name} came to {rng.choice(_PLACES)}."
                )
        yield " ".join(sentences)


class StoryText:
    """Seeded story paragraphs grown on demand; prefixes end at a word boundary."""

    def __init__(self, seed: float):
        self._paragraphs = story_paragraphs(random.Random(seed))
        self._text = ""

    def prefix(self, chars: int) -> str:
        while len(self._text) < chars:
            self._text += next(self._paragraphs) + "\n\n"
        if chars >= len(self._text):
            return self._text.rstrip()
        return self._text[: max(self._text.rfind(" ", 0, chars), 0)].rstrip()


# Standard-library packages used as code repositories, most popular first (a Zipf-like choice makes
# some contexts repeat often, as a team's main repository does).
REPOSITORIES = (
    "asyncio",
    "email",
    "http",
    "json",
    "logging",
    "concurrent",
    "importlib",
    "urllib",
    "multiprocessing",
    "xml",
    "unittest",
    "collections",
    "sqlite3",
    "tomllib",
    "zoneinfo",
    "wsgiref",
    "html",
    "xmlrpc",
    "dbm",
    "curses",
)
_SKIP_DIRS = {"test", "tests", "idle_test", "__pycache__"}


def stdlib_dir() -> Path:
    return Path(sysconfig.get_path("stdlib"))


@cache
def repository_files(name: str) -> tuple[tuple[str, str], ...]:
    """(path, source) of one package's .py files in a fixed order; empty when it is not installed."""
    root = stdlib_dir() / name
    files = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent)
        if _SKIP_DIRS & set(rel.parts):
            continue
        try:
            files.append((str(rel), path.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError):
            continue
    return tuple(files)


def available_repositories() -> tuple[str, ...]:
    repos = tuple(name for name in REPOSITORIES if repository_files(name))
    if not repos:
        raise RuntimeError(f"no Python standard-library source under {stdlib_dir()} to build code prompts from")
    return repos


class RepositoryContext:
    """The pasted context for a repository: its files, then the next repositories' if more is needed."""

    def __init__(self, start: str, repos: tuple[str, ...]):
        self.name = start
        order = repos[repos.index(start) :] + repos[: repos.index(start)]
        self._files = [f for repo in order for f in repository_files(repo)]
        self._text = ""
        self._next = 0

    def text(self, chars: int) -> str:
        """At least `chars` characters of context (or all of it), cut after a whole line."""
        while len(self._text) < chars and self._next < len(self._files):
            path, source = self._files[self._next]
            self._text += f"### {path}\n```python\n{source.rstrip()}\n```\n\n"
            self._next += 1
        if len(self._text) <= chars:
            return self._text
        cut = self._text.rfind("\n", 0, chars)
        return self._text[: cut + 1 if cut > 0 else chars]

    @property
    def size(self) -> int:
        return sum(len(source) for _, source in self._files)


_QUESTIONS = (
    "Explain what `{func}` in `{path}` does, step by step, and point out any edge case it misses.",
    "Write pytest unit tests for `{func}` in `{path}`, covering its error paths.",
    "Refactor `{func}` in `{path}` for readability without changing its behaviour; show the new code.",
    "Find a bug risk in `{func}` (`{path}`) and propose a fix as a unified diff.",
    "Add type hints and a docstring to `{func}` in `{path}`.",
)
_DEF = re.compile(r"^\s*def (\w+)\(", re.M)
_FILE = re.compile(r"^### (\S+)$", re.M)

CREATIVE_SYSTEM = "You are a novelist who continues stories in the author's voice."
CODE_SYSTEM = (
    "You are a senior software engineer. The user pastes part of a repository, then asks "
    "a question about it. Answer precisely and show code where it helps."
)


# -- fitting a prompt to a token count -----------------------------------------------------------------


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
        genre, style = rng.choice(_GENRES), rng.choice(_STYLES)
        words = rng.randrange(300, 900, 50)
        instruction = (
            f"Continue this {genre} story in a {style} style with about {words} words. Keep the "
            f"characters and places consistent and end on a turn the reader does not expect."
        )
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
        weights = [1 / (rank + 1) for rank in range(len(repos))]
        repo = rng.choices(repos, weights)[0]
        context = self._contexts.setdefault(repo, RepositoryContext(repo, repos))
        template = rng.choice(_QUESTIONS)
        pick = rng.random()

        def render(chars: int):
            text = context.text(chars)
            funcs = _DEF.findall(text) or ["main"]
            paths = _FILE.findall(text) or [f"{repo}/__init__.py"]
            question = template.format(func=funcs[int(pick * len(funcs))], path=paths[-1])
            return self._content(CODE_SYSTEM, f"Repository `{repo}`:\n\n{text}\nQuestion: {question}")

        content, tokens = self.fitter.fit(render, goal, limit_chars=context.size + 10000, ceiling=ceiling)
        return content, tokens, repo


def load_prompts_file(path: str | Path, api: str, default_output_tokens: int = 256) -> list[Prompt]:
    """A JSONL prompts file: vLLM's custom-dataset rows ({"prompt", "output_tokens"}), optionally with
    `messages` for chat. Lengths are whatever the file says; the server reports the real ones."""
    prompts = []
    path = Path(path)
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                text = row["prompt"]
            except (ValueError, KeyError, TypeError):
                raise ValueError(f"{path}:{lineno}: not a JSON object with a 'prompt' field") from None
            if api == "chat":
                content = row.get("messages") or [{"role": "user", "content": text}]
            else:
                content = text
            prompts.append(
                Prompt(
                    workload=row.get("workload", "file"),
                    content=content,
                    prompt_tokens=int(row.get("prompt_tokens") or 0),
                    target_tokens=int(row.get("target_tokens") or 0),
                    output_tokens=int(row.get("output_tokens") or default_output_tokens),
                    repo=row.get("repo"),
                )
            )
    if not prompts:
        raise ValueError(f"{path} holds no prompts")
    return prompts
