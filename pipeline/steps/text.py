"""The pipeline's text helpers: the tokenizer (common/tokenizer.py, shared with every layer), the
process-independent string hash gensim seeds its vectors with, and how well a vocabulary covers texts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from common.hashing import stable_string_hash
from common.settings import at_least, check_declared, setting
from common.tokenizer import PAD, UNK, encode_texts, tokenize

__all__ = ["PAD", "UNK", "GensimSettings", "encode_texts", "stable_string_hash", "tokenize", "vocabulary_coverage"]


@dataclass(frozen=True)
class GensimSettings:
    """What gensim's Word2Vec (the GRU's word vectors) and Doc2Vec are both trained with; the defaults are the word
    vectors' (Doc2Vec declares its own, the paper's)."""

    vector_size: int = setting(200, "dimension of the vectors learned", at_least(1))
    window: int = setting(5, "words of context on each side of a word", at_least(1))
    min_count: int = setting(5, "a word rarer than this in the train texts is dropped", at_least(1))
    epochs: int = setting(10, "passes over the train texts", at_least(1))

    def __post_init__(self) -> None:
        check_declared(self)

    def gensim_options(self, seed: int) -> dict[str, Any]:
        """What a gensim model is made with of these: the four settings, ``seed``, one worker (reproducible) and
        the process-independent string hash."""
        shared = {name: getattr(self, name) for name in ("vector_size", "window", "min_count", "epochs")}
        return {**shared, "seed": seed, "workers": 1, "hashfxn": stable_string_hash}

#: a text is "mostly unknown" when more than this share of its tokens is out of the vocabulary
MOSTLY_UNKNOWN = 0.5


def vocabulary_coverage(token_lists: Sequence[Sequence[str]], vocab: Mapping[str, int]) -> dict[str, float | int]:
    """How much of ``token_lists`` the vocabulary knows: the share of tokens out of it (they reach the GRU as
    UNK) and the share of texts with more than :data:`MOSTLY_UNKNOWN` of their tokens out of it."""
    tokens = sum(len(tokens) for tokens in token_lists)
    unknown = [sum(token not in vocab for token in tokens) for tokens in token_lists]
    mostly = sum(1 for n, tokens in zip(unknown, token_lists, strict=True) if tokens and n > MOSTLY_UNKNOWN * len(tokens))
    return {
        "texts": len(token_lists),
        "tokens": tokens,
        "unknown_token_share": sum(unknown) / tokens if tokens else 0.0,
        "mostly_unknown_text_share": mostly / len(token_lists) if token_lists else 0.0,
    }
