"""Word embeddings learned on the target dataset's train texts, to initialise the GRU (paper §3.3)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from gensim.models import Word2Vec

from common.settings import at_least, check_declared, setting
from pipeline.steps.text import UNK, stable_string_hash


@dataclass(frozen=True)
class WordVectorSettings:
    """Word2Vec on the target dataset's train texts, to initialise the GRU's embeddings."""

    vector_size: int = setting(200, "dimension of the word vectors (the GRU's input)", at_least(1))
    window: int = setting(5, "words of context on each side of a word", at_least(1))
    min_count: int = setting(5, "a word rarer than this in the train texts is unknown to the GRU", at_least(1))
    epochs: int = setting(10, "passes over the train texts", at_least(1))
    max_vocab: int = setting(50_000, "the most frequent words kept", at_least(1))

    def __post_init__(self) -> None:
        check_declared(self)


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
        vector_size=settings.vector_size,
        window=settings.window,
        min_count=settings.min_count,
        epochs=settings.epochs,
        seed=seed,
        workers=1,
        hashfxn=stable_string_hash,
        max_final_vocab=settings.max_vocab,
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
