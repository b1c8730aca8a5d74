"""Doc2Vec (gensim) on the train texts: the semantic space Ω of Thomas & Kovashka §3.2."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from gensim.models.doc2vec import Doc2Vec, TaggedDocument

from common.settings import at_least, one_of, redeclared, setting
from models.doc2vec import infer_vectors
from pipeline.steps.text import GensimSettings


@dataclass(frozen=True)
class Doc2VecSettings(GensimSettings):
    """gensim Doc2Vec, distributed memory with hierarchical softmax (paper §3.3); its vectors span the semantic
    space Ω. The paper's window, minimum count and epochs."""

    window: int = redeclared(GensimSettings, "window", 20)
    min_count: int = redeclared(GensimSettings, "min_count", 20)
    epochs: int = redeclared(GensimSettings, "epochs", 20)
    dm: int = setting(1, "1: distributed memory (PV-DM, the paper's); 0: distributed bag of words", one_of(0, 1))
    hs: int = setting(1, "1: hierarchical softmax (the paper's); 0: none (then negative > 0)", one_of(0, 1))
    negative: int = setting(0, "noise words drawn per word for negative sampling (0: none)", at_least(0))
    infer_epochs: int = setting(20, "passes inferring the vector of a text outside the train split", at_least(1))


def train_doc2vec(train_tokens: Sequence[list[str]], settings: Doc2VecSettings, seed: int) -> Doc2Vec:
    """Distributed-memory Doc2Vec with hierarchical softmax on the train texts (one worker: reproducible)."""
    if not train_tokens:
        raise ValueError("no train texts: Doc2Vec needs the train split to be non-empty")
    documents = [TaggedDocument(tokens, [i]) for i, tokens in enumerate(train_tokens)]
    model = Doc2Vec(dm=settings.dm, hs=settings.hs, negative=settings.negative, **settings.gensim_options(seed))
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
