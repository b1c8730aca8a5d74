"""The settings of the test-split evaluation (the metrics themselves are :mod:`evaluation.evaluate`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EvalSettings:
    n_way: int = 5
    redraws: int = 5
    #: the paper's k of Table 3 (capped at n_test - 1); always reported
    preservation_k: int = 200
    #: neighbor preservation is also reported at each of these k (those below n_test), with its chance level
    preservation_ks: tuple[int, ...] = (5, 10, 20, 50, 200)
    #: the paper's k / (n_test - 1): 200 neighbors among 24.6k-46k test items (0.4-0.8%); the headline k is
    #: the one of ``preservation_ks`` whose k / (n - 1) is closest to it
    paper_preservation_ratio: float = 0.006
    topic_k: int = 10
    #: paired bootstrap over test items and seeds for the headline differences
    bootstrap_resamples: int = 2000
