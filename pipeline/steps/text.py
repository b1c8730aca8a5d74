"""The pipeline's text helpers: the tokenizer (common/tokenizer.py, shared with every layer) and the
process-independent string hash gensim seeds its vectors with."""

from __future__ import annotations

from common.tokenizer import PAD, TOKEN_PATTERN, UNK, encode_texts, tokenize

__all__ = ["PAD", "TOKEN_PATTERN", "UNK", "encode_texts", "stable_string_hash", "tokenize"]


def stable_string_hash(text: str) -> int:
    """A process-independent replacement for ``hash`` (gensim seeds vectors with it)."""
    import zlib

    return zlib.crc32(text.encode("utf-8"))
