"""The generator's fixed knobs and the tables derived from the vocabulary, shared by text, drawing, recipe.

Changing any value here changes the generated data; ``GENERATOR_VERSION`` is part of every seed, so bump it
when the output of the same arguments is meant to change.
"""

from __future__ import annotations

import colorsys

import numpy as np

from data_recipes.embedded.vocabulary import TOPIC_MOTIFS, TOPICS

DEFAULT_N_PAIRS = 5500
#: word bounds of a text (two news sentences; the paper keeps an article's first two)
MIN_WORDS = 20
MAX_WORDS = 60
#: word shingles as the pipeline's MinHash dedup cuts them
SHINGLE_SIZE = 3
#: a republished copy is at least this close to its original, above any dedup threshold the profiles use
NEAR_DUPLICATE_MIN_JACCARD = 0.85
#: part of every seed: bump it when the same arguments are meant to give other data
GENERATOR_VERSION = 1

#: share of topic-word slots filled from a related topic: stories touch neighboring issues.
RELATED_WORD_SHARE = 0.3
#: how often a lead names what its picture shows; news text seldom describes its photo.
MOTIF_MENTION_PROBABILITY = 0.2
#: the weak topic cues (accent mark, background tint) are kept weaker than the motif: a linear model on
#: pixels stays below the motif rule (measured in docs/datasets/embedded.md).
ACCENT_PROBABILITY = 0.5
TINT_WEIGHT_RANGE = (0.05, 0.25)
#: chance of a second, smaller motif of any topic: news photos show more than one thing.
DISTRACTOR_PROBABILITY = 0.3


def motif_topics() -> dict[str, tuple[str, ...]]:
    """Motif -> the topics it illustrates (each motif serves 2-3 topics, so it is ambiguous on its own)."""
    served: dict[str, list[str]] = {}
    for topic, motifs in TOPIC_MOTIFS.items():
        for motif, _ in motifs:
            served.setdefault(motif, []).append(topic)
    return {motif: tuple(topics) for motif, topics in sorted(served.items())}


MOTIFS: dict[str, tuple[str, ...]] = motif_topics()

ACCENT_SHAPES = ("dot", "triangle", "square", "diamond")


def _topic_cues() -> dict[str, tuple[tuple[int, int, int], str]]:
    """Topic -> (cue colour, accent shape): hues spread evenly round the colour wheel, shapes cycled."""
    cues = {}
    for index, topic in enumerate(TOPICS):
        red, green, blue = colorsys.hsv_to_rgb(index / len(TOPICS), 0.85, 0.9)
        colour = (round(255 * red), round(255 * green), round(255 * blue))
        cues[topic] = (colour, ACCENT_SHAPES[index % len(ACCENT_SHAPES)])
    return cues


#: topic -> (RGB of its weak cues, the background tint and the accent mark; shape of the accent mark).
TOPIC_CUES: dict[str, tuple[tuple[int, int, int], str]] = _topic_cues()


def pick(rng: np.random.Generator, options: tuple[str, ...]) -> str:
    """One of ``options``, uniformly: every such draw of the generator goes through here, one integer each."""
    return options[int(rng.integers(len(options)))]
