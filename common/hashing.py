"""A process-independent string hash: gensim seeds its vectors with ``hash`` (salted per process), which
would make Doc2Vec and the word vectors differ from run to run."""

from __future__ import annotations

import zlib


def stable_string_hash(text: str) -> int:
    return zlib.crc32(text.encode("utf-8"))
