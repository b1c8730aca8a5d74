"""Doc2Vec vectors of new texts (gensim's inference), reproducible in every process: the pipeline infers the
validation and test texts with it, and a model bundle the texts of a table it is evaluated on."""

from __future__ import annotations

from collections.abc import Sequence
from unittest import mock

import numpy as np
from gensim.models import doc2vec as gensim_doc2vec
from gensim.models.doc2vec import Doc2Vec
from gensim.models.keyedvectors import pseudorandom_weak_vector

from common.hashing import stable_string_hash


def infer_vectors(model: Doc2Vec, token_lists: Sequence[list[str]], epochs: int) -> np.ndarray:
    """Document vectors by iterative backpropagation (§3.2), [N, vector_size] float32.

    gensim seeds each inferred vector from Python's salted ``hash`` of the text; we give it a stable hash
    so that the same parameters give the same vectors in every process.
    """

    def stable_seed_vector(size: int, seed_string: str | None = None, hashfxn=None) -> np.ndarray:
        return pseudorandom_weak_vector(size, seed_string=seed_string, hashfxn=stable_string_hash)

    vectors = np.zeros((len(token_lists), model.vector_size), dtype=np.float32)
    with mock.patch.object(gensim_doc2vec, "pseudorandom_weak_vector", stable_seed_vector):
        for i, tokens in enumerate(token_lists):
            # gensim's inference samples from model.random: seed it from the text, so a document's vector
            # does not depend on which documents were inferred before it (incremental rebuilds)
            model.random = np.random.RandomState(stable_string_hash(" ".join(tokens)))
            vectors[i] = model.infer_vector(list(tokens), epochs=epochs)
    return vectors
