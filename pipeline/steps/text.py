"""The pipeline's text helpers: the tokenizer (common/tokenizer.py, shared with every layer) and the
process-independent string hash gensim seeds its vectors with."""

from __future__ import annotations

from common.hashing import stable_string_hash
from common.tokenizer import PAD, TOKEN_PATTERN, UNK, encode_texts, tokenize

__all__ = ["PAD", "TOKEN_PATTERN", "UNK", "encode_texts", "stable_string_hash", "tokenize"]
