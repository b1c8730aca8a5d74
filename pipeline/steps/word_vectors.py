"""Word embeddings learned on the target dataset's train texts, to initialise the GRU (paper §3.3)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from gensim.models import Word2Vec

from common.settings import at_least, setting
from pipeline.steps.text import UNK, GensimSettings


@dataclass(frozen=True)
class WordVectorSettings(GensimSettings):
    """Word2Vec on the target dataset's train texts, to initialise the GRU's embeddings (a word rarer than
    ``min_count`` is unknown to the GRU)."""

    max_vocab: int = setting(50_000, "the most frequent words kept", at_least(1))


def train_word_vectors(
    train_tokens: Sequence[list[str]], settings: WordVectorSettings, seed: int
) -> tuple[dict[str, int], np.ndarray]:
    """Word2Vec (CBOW) on train texts only -> (vocab word->row, matrix [V, dim]).

    Row 0 is padding (zeros), row 1 the unknown word (mean of all vectors); the vocabulary is the Word2Vec
    vocabulary, most frequent first, capped at ``max_vocab``.
    """
    if not train_tokens:
        raise ValueError("no train texts to learn word vectors from")
    model = Word2Vec(
        sentences=[list(tokens) for tokens in train_tokens],
        max_final_vocab=settings.max_vocab,
        **settings.gensim_options(seed),
    )
    words = list(model.wv.index_to_key)
    if not words:
        raise ValueError(f"no word occurs {settings.min_count}+ times in the train texts; lower min_count")
    learned = np.asarray(model.wv.vectors, dtype=np.float32)
    matrix = np.zeros((len(words) + 2, settings.vector_size), dtype=np.float32)
    matrix[UNK] = learned.mean(axis=0)
    matrix[2:] = learned
    vocab = {word: row + 2 for row, word in enumerate(words)}
    return vocab, matrix
