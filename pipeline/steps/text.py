"""The pipeline's text helpers: the tokenizer (common/tokenizer.py, shared with every layer), the
process-independent string hash gensim seeds its vectors with, and how well a vocabulary covers texts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from common.hashing import stable_string_hash
from common.tokenizer import PAD, UNK, encode_texts, tokenize

__all__ = ["PAD", "UNK", "encode_texts", "stable_string_hash", "tokenize", "vocabulary_coverage"]

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
