"""The embedded dataset: a seeded, offline stand-in for non-literal news image-text pairs.

Thomas & Kovashka (ECCV 2020, §1 and §4.1) retrieve across news images and article text whose relation is
topical, not descriptive: one image (the scales of justice) illustrates several topics (abortion, same-sex
marriage, immigration), one topic is illustrated with visually unrelated images, and the scraped data holds
boilerplate text (site headers, privacy notices) paired with many images, removed with MinHash. This recipe
generates data with those properties from a seed, so the pipeline runs without downloads:

* text: two news-style sentences (20-60 words) from templates filled with the topic's vocabulary, shared
  background words and a share of words from related topics (:data:`TOPICS`);
* image: a small procedural picture whose dominant motif is shared by 2-3 topics (:data:`MOTIFS`), each topic
  using three unrelated motifs, plus weak topic cues (background tint, an optional accent mark);
* injected duplicates: boilerplate notices paired with many images, and near-identical copies of texts with a
  word-3-shingle Jaccard of at least :data:`NEAR_DUPLICATE_MIN_JACCARD` to their original.

Topics, motifs and duplicate clusters are returned in ``RecipeResult.ground_truth``, never in the manifest.
The dataset card is ``docs/datasets/embedded.md``.

Layout: :mod:`.vocabulary` (word lists and templates, data), :mod:`.design` (the generator's knobs and the
tables derived from the vocabulary), :mod:`.text` (sentences and copies), :mod:`.motifs` (what each motif
looks like), :mod:`.drawing` (composing a picture) and :mod:`.recipe` (``build``, registered as the recipe
``embedded``). Every public name is re-exported here, so ``from data_recipes.embedded import build, TOPICS,
words`` keeps working; the submodule is not called ``build`` because that name is the function's.
"""

from __future__ import annotations

from data_recipes.embedded.design import (
    ACCENT_PROBABILITY,
    ACCENT_SHAPES,
    DEFAULT_N_PAIRS,
    DISTRACTOR_PROBABILITY,
    GENERATOR_VERSION,
    MAX_WORDS,
    MIN_WORDS,
    MOTIF_MENTION_PROBABILITY,
    MOTIFS,
    NEAR_DUPLICATE_MIN_JACCARD,
    RELATED_WORD_SHARE,
    SHINGLE_SIZE,
    TINT_WEIGHT_RANGE,
    TOPIC_CUES,
    motif_topics,
)
from data_recipes.embedded.drawing import render_image
from data_recipes.embedded.motifs import MOTIF_PAINTERS, MOTIF_PALETTES, Colour, MotifPainter
from data_recipes.embedded.recipe import build
from data_recipes.embedded.text import shingle_jaccard, word_shingles, words
from data_recipes.embedded.vocabulary import (
    BACKGROUND_VOCAB,
    BOILERPLATE_TEXTS,
    FOLLOW_TEMPLATES,
    LEAD_TEMPLATES,
    MOTIF_PHRASES,
    NEAR_DUPLICATE_SUFFIXES,
    RELATED_TOPICS,
    TOPIC_MOTIFS,
    TOPIC_VOCAB,
    TOPICS,
)

__all__ = [
    "ACCENT_PROBABILITY",
    "ACCENT_SHAPES",
    "BACKGROUND_VOCAB",
    "BOILERPLATE_TEXTS",
    "Colour",
    "DEFAULT_N_PAIRS",
    "DISTRACTOR_PROBABILITY",
    "FOLLOW_TEMPLATES",
    "GENERATOR_VERSION",
    "LEAD_TEMPLATES",
    "MAX_WORDS",
    "MIN_WORDS",
    "MOTIFS",
    "MOTIF_MENTION_PROBABILITY",
    "MOTIF_PAINTERS",
    "MOTIF_PALETTES",
    "MOTIF_PHRASES",
    "MotifPainter",
    "NEAR_DUPLICATE_MIN_JACCARD",
    "NEAR_DUPLICATE_SUFFIXES",
    "RELATED_TOPICS",
    "RELATED_WORD_SHARE",
    "SHINGLE_SIZE",
    "TINT_WEIGHT_RANGE",
    "TOPICS",
    "TOPIC_CUES",
    "TOPIC_MOTIFS",
    "TOPIC_VOCAB",
    "build",
    "motif_topics",
    "render_image",
    "shingle_jaccard",
    "word_shingles",
    "words",
]
