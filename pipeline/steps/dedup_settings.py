"""The settings of near-duplicate removal, apart from the steps that read them (:mod:`pipeline.steps.minhash`,
:mod:`pipeline.steps.lsh_index`, :mod:`pipeline.steps.dedup`): each step's defaults are these."""

from __future__ import annotations

from dataclasses import dataclass

from common.settings import at_least, between, check_declared, setting


@dataclass(frozen=True)
class DedupSettings:
    """MinHash LSH near-duplicate removal (``Deduplicate``); the defaults of :func:`deduplicate` too, so the
    one-shot call removes what the pipeline removes."""

    threshold: float = setting(
        0.7, "two texts are near-duplicates when their shingle sets' Jaccard similarity reaches this", between(0, 1)
    )
    num_perm: int = setting(128, "MinHash permutations (signature length)", at_least(2))
    shingle_size: int = setting(3, "words per shingle", at_least(1))

    def __post_init__(self) -> None:
        check_declared(self)


DEFAULTS = DedupSettings()

__all__ = ["DEFAULTS", "DedupSettings"]
