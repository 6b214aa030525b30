"""What a client must do for a profile's model that vLLM cannot set server-side.

vLLM applies only sampling defaults from the server (--override-generation-config); per-request
settings such as ignore_eos or skip_special_tokens, and a model's text conventions, are the
client's job. The profile's `client:` section states them once; load generators and tools use
these helpers instead of knowing about any one model.
"""

from __future__ import annotations

from .profiles import Profile

REQUEST_KEYS = ("ignore_eos", "skip_special_tokens", "stop", "stop_token_ids")


def request_fields(profile: Profile) -> dict:
    """Fields to add to every /v1/completions or /v1/chat/completions request body."""
    return {key: profile.client[key] for key in REQUEST_KEYS if profile.client.get(key) not in (None, [])}


def to_model_text(profile: Profile, text: str) -> str:
    """A prompt as the model was trained to see it (Janeway: line breaks as `</s>`)."""
    token = profile.client.get("newline_token")
    return text.replace("\n", token) if token else text


def from_model_text(profile: Profile, text: str) -> str:
    """A completion as a person should read it (Janeway: `</s>` back to a line break)."""
    token = profile.client.get("newline_token")
    return text.replace(token, "\n") if token else text
