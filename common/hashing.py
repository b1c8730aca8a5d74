"""Hashes that are the same in every process: of a string (gensim seeds its vectors with ``hash``, salted per
process, which would make Doc2Vec and the word vectors differ from run to run) and of a JSON-able payload
(output folders and run plans are named by one: the engine's, :func:`task_engine.hashing.stable_hash`)."""

from __future__ import annotations

import hashlib
import zlib
from typing import Any

from task_engine.hashing import stable_hash

__all__ = ["file_sha256", "stable_hash", "stable_string_hash"]


def stable_string_hash(text: str) -> int:
    return zlib.crc32(text.encode("utf-8"))


def file_sha256(path: Any) -> str:
    """The SHA-256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
