"""One tokenizer for validation, Doc2Vec, the word vectors and the GRU, so all of them see the same words; it
lives in the bottom layer because data validation (data_recipes/) and a model bundle (serving/) must tokenise
exactly as training did, without the pipeline.

Version 2 (the current one) reads text in any language: NFKC normalisation, then case folding
(``str.casefold``: "Straße" and "STRASSE" meet), then words made of the letters, combining marks and digits
of every script (not the underscore). As for English before, an apostrophe inside a word keeps one suffix
of letters ("don't"; the typographic ’ counts as one) and a hyphen splits ("state-run" -> "state", "run").
Han, Hiragana and Katakana are written without spaces: without a segmenter each of their characters is a
token of its own (the usual fallback; a word segmenter would do better for Chinese and Japanese).

Version 1 (before 1.0, never released) kept ``[a-z0-9]+`` after lower-casing: "München" became "m", "nchen"
and a Chinese text no token at all. On ASCII text version 2 gives the same tokens, by the same expression
(:func:`ascii_words`, its fast path), so the demo's tokens did not move (``tests/test_tokenizer.py``).
"""

from __future__ import annotations

import functools
import re
import sys
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from common.registry import Registry

PAD, UNK = 0, 1
#: the tokenizer every task and a new bundle use; part of the output hash of every task that tokenises
TOKENIZER_VERSION = 2

ASCII_WORDS = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
#: scripts written without spaces: one token per character
_UNSEGMENTED = (
    (0x3040, 0x30FF),  # Hiragana, Katakana
    (0x31F0, 0x31FF),  # Katakana phonetic extensions
    (0x3400, 0x4DBF),  # CJK unified ideographs extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0x20000, 0x323AF),  # CJK extensions B-H
)


def ascii_words(text: str) -> list[str]:
    """Version 2 on ASCII text: lower-cased letters and digits, one apostrophe suffix."""
    return ASCII_WORDS.findall(text.lower())


def _ranges(codes: Iterable[int]) -> str:
    """A regex character class body for the code points ``codes`` (ascending), as ranges."""
    parts, start, previous = [], None, None
    for code in codes:
        if start is None:
            start = previous = code
        elif code == previous + 1:
            previous = code
        else:
            parts.append((start, previous))
            start = previous = code
    if start is not None:
        parts.append((start, previous))
    return "".join(re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in parts)


@dataclass(frozen=True)
class _Version2:
    """What version 2 matches, built once from this Python's Unicode database. A word character is what
    ``str.isalnum`` accepts (the letters and numbers of every script) or a combining mark (M*: Devanagari's
    vowel signs, Arabic's harakat, which ``isalnum`` refuses). Matching a class of thousands of marks at
    every character is 6x slower, so it runs only for a text that holds a mark (a set test)."""

    unsegmented_chars: frozenset[str]
    unsegmented: re.Pattern[str]
    mark_chars: frozenset[str]
    words: re.Pattern[str]
    words_with_marks: re.Pattern[str]


@functools.cache
def _version_2() -> _Version2:
    marks = [code for code in range(sys.maxunicode + 1) if unicodedata.category(chr(code))[0] == "M"]
    unsegmented = [
        code for a, b in _UNSEGMENTED for code in range(a, b + 1) if unicodedata.category(chr(code))[0] in "LMN"
    ]
    mark_class = _ranges(marks)
    word, letter = rf"(?:[^\W_]|[{mark_class}])", rf"(?:[^\W\d_]|[{mark_class}])"
    return _Version2(
        unsegmented_chars=frozenset(map(chr, unsegmented)),
        unsegmented=re.compile(f"([{_ranges(unsegmented)}])"),
        mark_chars=frozenset(map(chr, marks)),
        words=re.compile(r"[^\W_]+(?:'[^\W\d_]+)?"),
        words_with_marks=re.compile(rf"{word}+(?:'{letter}+)?"),
    )


def tokenize_v2(text: str) -> list[str]:
    if text.isascii():  # NFKC and casefold change no ASCII letter: the same tokens, faster
        return ascii_words(text)
    version = _version_2()
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold()).replace("\u2019", "'")
    if not version.unsegmented_chars.isdisjoint(folded):
        folded = version.unsegmented.sub(r" \1 ", folded)
    words = version.words if version.mark_chars.isdisjoint(folded) else version.words_with_marks
    return words.findall(folded)


#: the tokenizers by version (a bundle records the one it was trained with): a later version is added here
#: beside the current one, so a bundle of the earlier keeps reading its texts as it was trained to
TOKENIZERS: Registry[Callable[[str], list[str]]] = Registry("tokenizer version")
TOKENIZERS.add(str(TOKENIZER_VERSION), tokenize_v2)
tokenize = TOKENIZERS.get(str(TOKENIZER_VERSION))


def tokenizer_for(version: int) -> Callable[[str], list[str]]:
    """The tokenizer of ``version`` (what a bundle records); one ``KeyError`` message for a version this code
    does not have."""
    return TOKENIZERS.get(str(version))


def encode_texts(
    token_lists: Iterable[Sequence[str]], vocab: dict[str, int], max_tokens: int
) -> tuple[np.ndarray, np.ndarray]:
    """Token lists -> (int64 ids [N, max_tokens] padded with PAD, lengths [N]); unknown words -> UNK.

    Texts longer than ``max_tokens`` keep their first words (news leads carry the topic).
    """
    rows = [[vocab.get(word, UNK) for word in tokens[:max_tokens]] for tokens in token_lists]
    ids = np.full((len(rows), max_tokens), PAD, dtype=np.int64)
    lengths = np.zeros(len(rows), dtype=np.int64)
    for i, row in enumerate(rows):
        if not row:  # validation rejects texts without a token (no_tokens); a query may still have none
            row = [UNK]
        ids[i, : len(row)] = row
        lengths[i] = len(row)
    return ids, lengths
