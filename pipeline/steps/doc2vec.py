"""Doc2Vec (gensim) on the train texts: the semantic space Ω of Thomas & Kovashka §3.2."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from gensim.models.doc2vec import Doc2Vec, TaggedDocument

from common.hashing import stable_string_hash
from models.doc2vec import infer_vectors


@dataclass(frozen=True)
class Doc2VecSettings:
    """gensim Doc2Vec, distributed memory with hierarchical softmax (paper §3.3)."""

    vector_size: int = 200
    window: int = 20
    min_count: int = 20
    epochs: int = 20
    dm: int = 1
    hs: int = 1
    negative: int = 0
    infer_epochs: int = 20


def train_doc2vec(train_tokens: Sequence[list[str]], settings: Doc2VecSettings, seed: int) -> Doc2Vec:
    """Distributed-memory Doc2Vec with hierarchical softmax on the train texts (one worker: reproducible)."""
    if not train_tokens:
        raise ValueError("no train texts: Doc2Vec needs the train split to be non-empty")
    documents = [TaggedDocument(tokens, [i]) for i, tokens in enumerate(train_tokens)]
    model = Doc2Vec(
        vector_size=settings.vector_size,
        window=settings.window,
        min_count=settings.min_count,
        dm=settings.dm,
        hs=settings.hs,
        negative=settings.negative,
        epochs=settings.epochs,
        seed=seed,
        workers=1,
        hashfxn=stable_string_hash,
    )
    model.build_vocab(documents)
    if not model.wv.index_to_key:
        raise ValueError(
            f"Doc2Vec vocabulary is empty with min_count={settings.min_count}: the train texts are too few "
            "or too short; lower doc2vec min_count in the profile"
        )
    model.train(documents, total_examples=len(documents), epochs=model.epochs)
    return model


def document_vectors(
    model: Doc2Vec, train_tokens: Sequence[list[str]], other_tokens: Sequence[list[str]], epochs: int
) -> tuple[np.ndarray, np.ndarray]:
    """Vectors of the train documents (as trained) and of every other document (inferred)."""
    train = np.asarray(model.dv.vectors[: len(train_tokens)], dtype=np.float32)
    return train, infer_vectors(model, other_tokens, epochs)
