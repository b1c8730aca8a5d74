"""One tokenizer for validation, Doc2Vec, the word vectors and the GRU, so all of them see the same words; it
lives in the bottom layer because data validation (data_recipes/) and a model bundle (serving/) must tokenise
exactly as training did, without the pipeline."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import numpy as np

TOKEN_PATTERN = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
PAD, UNK = 0, 1


def tokenize(text: str) -> list[str]:
    return TOKEN_PATTERN.findall(text.lower())


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
        if not row:  # validation rejects empty texts; a text of only punctuation still gets one UNK
            row = [UNK]
        ids[i, : len(row)] = row
        lengths[i] = len(row)
    return ids, lengths
