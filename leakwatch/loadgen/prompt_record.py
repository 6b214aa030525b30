"""One prompt as the load generator sends it, and the JSONL prompts file it is written to and read from.

`Prompt` is what the corpus builder produces and the sender sends: the chat messages or completion
text, the measured and targeted token counts and whether the context clamped them. Its `to_json`
rows and `load_prompts_file` share one format, vLLM's custom-dataset rows (`prompt`,
`output_tokens`, optionally `messages`), so a corpus built here can be replayed by vLLM's own
benchmark client and a file from elsewhere can drive this load generator.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path


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
