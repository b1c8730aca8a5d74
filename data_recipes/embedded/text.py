"""Text generation: news-style sentences from the templates, republished copies, word shingles.

Texts come from :data:`~data_recipes.embedded.vocabulary.LEAD_TEMPLATES` and ``FOLLOW_TEMPLATES``; the
shingle helpers measure what MinHash dedup will see, so that near-duplicates are made close enough to
be caught and originals far enough apart not to be.
"""

from __future__ import annotations

import re

import numpy as np

from data_recipes.embedded.design import (
    MAX_WORDS,
    MIN_WORDS,
    MOTIF_MENTION_PROBABILITY,
    NEAR_DUPLICATE_MIN_JACCARD,
    RELATED_WORD_SHARE,
    SHINGLE_SIZE,
    pick,
)
from data_recipes.embedded.vocabulary import (
    BACKGROUND_VOCAB,
    FOLLOW_TEMPLATES,
    LEAD_TEMPLATES,
    MOTIF_PHRASES,
    NEAR_DUPLICATE_SUFFIXES,
    RELATED_TOPICS,
    TOPIC_VOCAB,
)

_SLOT = re.compile(r"\{([A-Z])\}")
_ALTERNATIVES = re.compile(r"\[([^\]]+)\]")
_WORD = re.compile(r"[a-z0-9']+")
_ARTICLE_BEFORE_VOWEL = re.compile(r"\b([Aa]) (?=[aeiou])")


def words(text: str) -> list[str]:
    """Lower-case word tokens (letters, digits, apostrophes): how lengths and shingles are counted here."""
    return _WORD.findall(text.lower())


def word_shingles(text: str, size: int = SHINGLE_SIZE) -> set[tuple[str, ...]]:
    """The set of ``size`` consecutive words of ``text`` (a text shorter than ``size`` is one shingle)."""
    if size < 1:
        raise ValueError(f"shingle size must be >= 1, got {size}")
    tokens = words(text)
    if len(tokens) <= size:
        return {tuple(tokens)}
    return {tuple(tokens[i : i + size]) for i in range(len(tokens) - size + 1)}


def shingle_jaccard(a: str, b: str, size: int = SHINGLE_SIZE) -> float:
    """Exact Jaccard similarity of the word-shingle sets of two texts (what MinHash estimates)."""
    sa, sb = word_shingles(a, size), word_shingles(b, size)
    return len(sa & sb) / len(sa | sb)


def _fill(template: str, topic: str, rng: np.random.Generator) -> str:
    """Fill each slot independently: topic words, with a share from a related topic, or background words."""

    def draw(match: re.Match[str]) -> str:
        slot = match.group(1)
        if slot in BACKGROUND_VOCAB:
            return pick(rng, BACKGROUND_VOCAB[slot])
        source = topic
        if rng.random() < RELATED_WORD_SHARE:
            source = pick(rng, RELATED_TOPICS[topic])
        return pick(rng, TOPIC_VOCAB[source][slot])

    def choose(match: re.Match[str]) -> str:
        return pick(rng, tuple(match.group(1).split("|")))

    return _ARTICLE_BEFORE_VOWEL.sub(r"\1n ", _SLOT.sub(draw, _ALTERNATIVES.sub(choose, template)))


def _sentence_case(sentence: str) -> str:
    return sentence[:1].upper() + sentence[1:]


def news_text(topic: str, motif: str, rng: np.random.Generator) -> str:
    """Two news sentences about ``topic`` (20-60 words); sometimes one names the picture's ``motif``."""
    while True:
        lead = _fill(pick(rng, LEAD_TEMPLATES), topic, rng)
        follow = _fill(pick(rng, FOLLOW_TEMPLATES), topic, rng)
        if rng.random() < MOTIF_MENTION_PROBABILITY:
            lead = f"{lead[:-1]} {pick(rng, MOTIF_PHRASES[motif])}."
        text = f"{_sentence_case(lead)} {_sentence_case(follow)}"
        if MIN_WORDS <= len(words(text)) <= MAX_WORDS:
            return text


def near_duplicate(original: str, rng: np.random.Generator) -> str:
    """A republished copy: one or two words swapped for filler words and/or a credit line appended,
    redrawn until its shingle Jaccard with ``original`` is at least ``NEAR_DUPLICATE_MIN_JACCARD``."""
    tokens = original.split(" ")
    while True:
        edited = list(tokens)
        n_swaps = int(rng.integers(0, 3))
        for _ in range(n_swaps):
            position = int(rng.integers(len(edited)))
            punctuation = edited[position][-1] if edited[position][-1] in ",." else ""
            edited[position] = pick(rng, ("also", "now", "again", "still", "reportedly")) + punctuation
        if n_swaps == 0 or rng.random() < 0.5:
            edited.append(pick(rng, NEAR_DUPLICATE_SUFFIXES))
        copy = " ".join(edited)
        if (
            copy != original
            and len(words(copy)) <= MAX_WORDS
            and shingle_jaccard(copy, original) >= NEAR_DUPLICATE_MIN_JACCARD
        ):
            return copy
