"""How far each modality of the embedded dataset gives its topic away, with simple held-out classifiers.

The embedded data stands in for non-literal news (Thomas & Kovashka, ECCV 2020, §1): the text names its
topic, while an image is ambiguous on its own. This module measures that on a built dataset, fitting on 80%
of the original pairs and scoring on the other 20% (boilerplate pairs carry no topic in their text, and
near-duplicate copies would leak their original into the test share, so both are left out):

* text: multinomial naive Bayes over word counts;
* image motif: the best rule that sees only the generator's motif label (motif -> most frequent topic), an
  upper bound for any model that recognises the motif perfectly but ignores the weaker cues;
* image pixels: multinomial logistic regression on downsampled pixels (a weak, linear reader of the image).

Run ``python -m benchmarks.embedded_guessability --n-pairs 5500`` from the repository root to print the
figures as JSON (they are quoted in ``docs/datasets/embedded.md``). It is an analysis of the generator, not a
recipe, so it lives here rather than in ``data_recipes``; ``tests/test_embedded.py`` checks the card's claim
with it on a small build. ``--quick`` (400 pairs at 32 px) proves the command in seconds, not the figures.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from data_recipes.embedded import DEFAULT_N_PAIRS, TOPIC_MOTIFS, build, words
from data_recipes.manifest import RecipeResult

GROUND_TRUTH_COLUMNS = ("pair_id", "topic", "kind", "motif")


def _split(n: int, test_share: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.random.default_rng(seed).permutation(n)
    n_test = max(1, round(n * test_share))
    return order[n_test:], order[:n_test]


def naive_bayes_accuracy(
    train_texts: list[str], train_labels: np.ndarray, test_texts: list[str], test_labels: np.ndarray
) -> float:
    """Accuracy of multinomial naive Bayes (Laplace smoothing) over lower-case word counts."""
    vocabulary = {word: i for i, word in enumerate(sorted({w for t in train_texts for w in words(t)}))}
    classes = np.unique(train_labels)
    counts = np.ones((len(classes), len(vocabulary)))
    for text, label in zip(train_texts, train_labels, strict=True):
        row = int(np.searchsorted(classes, label))
        for word in words(text):
            counts[row, vocabulary[word]] += 1
    log_likelihood = np.log(counts / counts.sum(axis=1, keepdims=True))
    log_prior = np.log(np.array([np.mean(train_labels == c) for c in classes]))
    predictions = []
    for text in test_texts:
        known = [vocabulary[w] for w in words(text) if w in vocabulary]
        predictions.append(classes[int(np.argmax(log_prior + log_likelihood[:, known].sum(axis=1)))])
    return float(np.mean(np.asarray(predictions) == test_labels))


def motif_rule_accuracy(
    train_motifs: np.ndarray, train_labels: np.ndarray, test_motifs: np.ndarray, test_labels: np.ndarray
) -> float:
    """Accuracy of predicting, for each motif, the topic it most often illustrates in the training share."""
    fallback = Counter(train_labels.tolist()).most_common(1)[0][0]
    rule = {
        motif: Counter(train_labels[train_motifs == motif].tolist()).most_common(1)[0][0]
        for motif in np.unique(train_motifs)
    }
    predictions = np.array([rule.get(motif, fallback) for motif in test_motifs])
    return float(np.mean(predictions == test_labels))


def motif_rule_ceiling() -> float:
    """Expected accuracy of the best motif -> topic rule under the generator's design, topics equally likely:
    the mean over topics of P(motif | topic) for the motifs whose most likely topic it is."""
    best: dict[str, float] = {}
    for motifs in TOPIC_MOTIFS.values():
        for motif, weight in motifs:
            best[motif] = max(best.get(motif, 0.0), weight / sum(w for _, w in motifs))
    return sum(best.values()) / len(TOPIC_MOTIFS)


def _softmax_regression(features: np.ndarray, labels: np.ndarray, n_classes: int, l2: float) -> np.ndarray:
    """Weights (with bias row) minimising mean cross-entropy + l2/2 |W|^2, by accelerated gradient descent."""
    x = np.hstack([features, np.ones((len(features), 1))])
    targets = np.eye(n_classes)[labels]
    # the softmax loss has curvature at most 1/2 |X|^2 / n; stepping by its inverse cannot diverge
    step = 1.0 / (0.5 * np.linalg.norm(x, 2) ** 2 / len(x) + l2)
    weights = np.zeros((x.shape[1], n_classes))
    momentum = weights.copy()
    for iteration in range(1, 301):
        logits = x @ momentum
        logits -= logits.max(axis=1, keepdims=True)
        probabilities = np.exp(logits)
        probabilities /= probabilities.sum(axis=1, keepdims=True)
        gradient = x.T @ (probabilities - targets) / len(x) + l2 * momentum
        updated = momentum - step * gradient
        momentum = updated + (iteration - 1) / (iteration + 2) * (updated - weights)
        weights = updated
    return weights


def pixel_logistic_accuracy(
    train_pixels: np.ndarray, train_labels: np.ndarray, test_pixels: np.ndarray, test_labels: np.ndarray
) -> float:
    """Accuracy of softmax regression on standardised pixels; the L2 weight is chosen on a held-out fifth
    of the training share, then the model is refitted on all of it."""
    classes, train_y = np.unique(train_labels, return_inverse=True)
    mean, std = train_pixels.mean(axis=0), train_pixels.std(axis=0) + 1e-6
    train_x, test_x = (train_pixels - mean) / std, (test_pixels - mean) / std
    fit_rows, val_rows = _split(len(train_x), 0.2, seed=1)

    def accuracy(weights: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
        return float(np.mean(np.argmax(np.hstack([x, np.ones((len(x), 1))]) @ weights, axis=1) == y))

    best_l2 = max(
        (1e-3, 1e-2, 1e-1, 1.0),
        key=lambda l2: accuracy(
            _softmax_regression(train_x[fit_rows], train_y[fit_rows], len(classes), l2),
            train_x[val_rows],
            train_y[val_rows],
        ),
    )
    weights = _softmax_regression(train_x, train_y, len(classes), best_l2)
    predicted = classes[np.argmax(np.hstack([test_x, np.ones((len(test_x), 1))]) @ weights, axis=1)]
    return float(np.mean(predicted == test_labels))


def _load_pixels(paths: list[str], side: int) -> np.ndarray:
    rows = []
    for path in paths:
        with Image.open(path) as image:
            small = image.convert("RGB").resize((side, side), Image.Resampling.BOX)
        rows.append(np.asarray(small, dtype=np.float64).ravel() / 255.0)
    return np.stack(rows)


def topic_guessability(
    result: RecipeResult, seed: int = 0, test_share: float = 0.2, pixel_side: int = 16
) -> dict[str, float | int]:
    """Held-out topic accuracy from text, from the image motif alone and from image pixels, with chance.

    Returns ``text_naive_bayes``, ``image_motif_rule``, ``image_motif_rule_ceiling`` (the rule's expected
    accuracy from the design, :func:`motif_rule_ceiling`), ``image_pixels_logistic``, ``chance_uniform``
    (1 / number of topics), ``chance_majority`` (always guessing the most frequent training topic),
    ``n_topics``, ``n_train`` and ``n_test``.
    """
    truth = result.ground_truth
    if truth is None or any(column not in truth.columns for column in GROUND_TRUTH_COLUMNS):
        raise ValueError(
            f"topic_guessability needs ground truth with columns {list(GROUND_TRUTH_COLUMNS)}; build the "
            "dataset with data_recipes.embedded.build"
        )
    if not 0 < test_share < 1:
        raise ValueError(f"test_share={test_share} must lie strictly between 0 and 1")
    pairs = result.manifest.merge(truth, on="pair_id", validate="one_to_one")
    pairs = pairs[pairs["kind"] == "original"].reset_index(drop=True)
    if pairs["topic"].nunique() < 2 or len(pairs) < 10:
        raise ValueError(
            f"only {len(pairs)} original pairs over {pairs['topic'].nunique()} topics; build more"
        )

    train, test = _split(len(pairs), test_share, seed)
    topics = pairs["topic"].to_numpy(dtype=object)
    motifs = pairs["motif"].to_numpy(dtype=object)
    texts = pairs["text"].tolist()
    pixels = _load_pixels(pairs["image_path"].tolist(), pixel_side)
    majority = Counter(topics[train].tolist()).most_common(1)[0][0]
    return {
        "text_naive_bayes": naive_bayes_accuracy(
            [texts[i] for i in train], topics[train], [texts[i] for i in test], topics[test]
        ),
        "image_motif_rule": motif_rule_accuracy(motifs[train], topics[train], motifs[test], topics[test]),
        "image_motif_rule_ceiling": motif_rule_ceiling(),
        "image_pixels_logistic": pixel_logistic_accuracy(
            pixels[train], topics[train], pixels[test], topics[test]
        ),
        "chance_uniform": 1.0 / pairs["topic"].nunique(),
        "chance_majority": float(np.mean(topics[test] == majority)),
        "n_topics": int(pairs["topic"].nunique()),
        "n_train": len(train),
        "n_test": len(test),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Build the embedded dataset and print its topic guessability as JSON (and return it)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-pairs", type=int, default=DEFAULT_N_PAIRS)
    parser.add_argument("--seed", type=int, default=0, help="dataset seed (the split uses seed 0)")
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--work-dir", type=Path, default=None, help="where images go (default: a temp dir)")
    parser.add_argument("--quick", action="store_true", help="400 pairs at 32 px (a smoke test)")
    args = parser.parse_args(argv)
    if args.quick:
        args.n_pairs, args.image_size = 400, 32
    with tempfile.TemporaryDirectory() as scratch:
        work_dir = args.work_dir or Path(scratch)
        result = build(None, work_dir, n_pairs=args.n_pairs, seed=args.seed, image_size=args.image_size)
        figures = topic_guessability(result)
    out = {"n_pairs": args.n_pairs, "seed": args.seed, **figures}
    print(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
