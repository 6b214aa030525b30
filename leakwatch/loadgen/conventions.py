"""A served model's client conventions (its profile's `client:` section) applied to every request.

Janeway-like models were trained with line breaks written as `</s>`: a prompt must reach the model
that way, its completions must be read back with line breaks, and `</s>` must not end generation
(ignore_eos, skip_special_tokens false). `leakwatch.core.model_text` holds the rules; this wraps them
for what sends requests: the load generator, the drill and the benches.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core import model_text, profiles as model_profiles


@dataclass(frozen=True)
class ClientConventions:
    profile: model_profiles.Profile | None = None

    @property
    def name(self) -> str:
        return self.profile.name if self.profile else "none"

    def prompt(self, content):
        """A prompt string or chat message list as the model must see it."""
        if self.profile is None:
            return content
        if isinstance(content, str):
            return model_text.to_model_text(self.profile, content)
        return [
            {**m, "content": model_text.to_model_text(self.profile, m["content"])}
            if isinstance(m.get("content"), str)
            else m
            for m in content
        ]

    def completion(self, text: str) -> str:
        """Generated text as a person reads it."""
        return model_text.from_model_text(self.profile, text) if self.profile else text

    def request_fields(self) -> dict:
        """Per-request fields (stop, stop_token_ids, skip_special_tokens, ignore_eos)."""
        return model_text.request_fields(self.profile) if self.profile else {}

    def describe(self) -> dict:
        return {
            "profile": self.name,
            "newline_token": self.profile.client.get("newline_token") if self.profile else None,
            "request_fields": self.request_fields(),
        }


NONE = ClientConventions()


def for_profile(name: str) -> ClientConventions:
    return ClientConventions(model_profiles.load(name))


def resolve(choice: str, model: str, served_root: str | None = None) -> ClientConventions:
    """--client-profile: a profile name, `none`, or `auto` (the profile whose served name is the
    model under test, or the demo model's; no conventions when no profile serves it)."""
    choice = (choice or "auto").strip()
    if choice == "none":
        return NONE
    if choice != "auto":
        return for_profile(choice)
    for name in model_profiles.available():
        try:
            profile = model_profiles.load(name)
        except Exception:  # noqa: BLE001 - a broken profile is reported by its own tests, not by a load test
            continue
        if profile.served_name == model and profile.client:
            return ClientConventions(profile)
    return NONE
