"""The creative-writing profile's text: seeded story paragraphs and the continuation request.

Stories come from a small seeded grammar (names, places, objects, feelings), so the creative
corpus needs no text corpus to ship or download and is the same on every machine for a seed.
`StoryText` grows those paragraphs on demand and cuts prefixes at a word boundary, which is what
the prompt fitter needs to hit a token count; `continuation_instruction` draws the genre, style and
length the request asks for.
"""

from __future__ import annotations

import random

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
GENRES = ("fantasy", "science fiction", "mystery", "historical", "gothic", "adventure", "fable")
STYLES = ("lyrical", "terse", "humorous", "suspenseful", "dreamlike", "plain-spoken")

CREATIVE_SYSTEM = "You are a novelist who continues stories in the author's voice."


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


def continuation_instruction(rng: random.Random) -> str:
    """The user's request: continue the story in a drawn genre and style, at a drawn length."""
    genre, style = rng.choice(GENRES), rng.choice(STYLES)
    words = rng.randrange(300, 900, 50)
    return (
        f"Continue this {genre} story in a {style} style with about {words} words. Keep the "
        f"characters and places consistent and end on a turn the reader does not expect."
    )
