"""The settings of the test-split evaluation (the metrics themselves are :mod:`evaluation.evaluate`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from common.settings import at_least, between, check_declared, each, setting


@dataclass(frozen=True)
class EvalSettings:
    n_way: int = setting(5, "items per n-way retrieval task (the positive and n - 1 random distractors)", at_least(2))
    redraws: int = setting(5, "draws of the n-way tasks' distractors, averaged", at_least(1))
    preservation_k: int = setting(
        200, "the paper's k of neighbor preservation (Table 3; capped at n_test - 1), always reported", at_least(1)
    )
    preservation_ks: tuple[int, ...] = setting(
        (5, 10, 20, 50, 200),
        "neighbor preservation is also reported at each of these k below n_test, with its chance level",
        each(at_least(1), "a list of k >= 1"),
    )
    #: 200 neighbors among 24.6k-46k test items (0.4-0.8%)
    paper_preservation_ratio: float = setting(
        0.006,
        "the paper's k / (n_test - 1): the headline k is the one of preservation_ks whose ratio is closest to it",
        between(0, 1),
    )
    topic_k: int = setting(10, "neighbors whose topic the topic precision counts", at_least(1))
    bootstrap_resamples: int = setting(
        2000, "paired bootstrap resamples (test items and seeds) of the headline differences", at_least(1)
    )

    def __post_init__(self) -> None:
        check_declared(self)

    def test_split_options(self) -> dict[str, Any]:
        """What ``evaluation.evaluate.evaluate_test_split`` takes of these: all but the report's bootstrap."""
        return {name: value for name, value in asdict(self).items() if name != "bootstrap_resamples"}
