"""Image rendering: a background with a weak topic tint, clutter, the dominant motif, maybe a distractor
motif and an accent mark, then noise. Every draw comes from the generator passed in, in a fixed order, so
the same generator state gives the same PNG bytes.
"""

from __future__ import annotations

import math

import numpy as np
from PIL import Image, ImageDraw

from data_recipes.embedded.design import (
    ACCENT_PROBABILITY,
    DISTRACTOR_PROBABILITY,
    TINT_WEIGHT_RANGE,
    TOPIC_CUES,
    pick,
)
from data_recipes.embedded.motifs import MOTIF_PAINTERS, MOTIF_PALETTES, Colour


def _jitter(rgb: tuple[int, int, int], rng: np.random.Generator, spread: float, brightness: float) -> Colour:
    values = np.clip(np.asarray(rgb, dtype=float) * brightness + rng.normal(0.0, spread, 3), 0, 255)
    return (int(values[0]), int(values[1]), int(values[2]), 255)


def _background(topic: str, size: int, rng: np.random.Generator) -> Image.Image:
    """A muted random colour pulled slightly towards the topic's cue colour, with a gradient and noise."""
    base = rng.uniform(110, 230, 3)
    tint_weight = rng.uniform(*TINT_WEIGHT_RANGE)
    colour = (1 - tint_weight) * base + tint_weight * np.asarray(TOPIC_CUES[topic][0], dtype=float)
    angle = rng.uniform(0, 2 * math.pi)
    ramp = np.linspace(-1.0, 1.0, size)
    gradient = math.cos(angle) * ramp[None, :] + math.sin(angle) * ramp[:, None]
    pixels = colour[None, None, :] + rng.uniform(5, 25) * gradient[:, :, None]
    pixels = pixels + rng.normal(0.0, 6.0, (size, size, 3))
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), mode="RGB")


def _clutter(image: Image.Image, rng: np.random.Generator) -> None:
    """Background shapes in random colours, so no pixel region is reserved for the motif."""
    draw = ImageDraw.Draw(image)
    size = image.width
    for _ in range(int(rng.integers(2, 7))):
        colour = tuple(int(v) for v in rng.integers(30, 240, 3))
        x0, y0 = (float(v) for v in rng.uniform(0, size, 2))
        x1, y1 = x0 + rng.uniform(-0.4, 0.4) * size, y0 + rng.uniform(-0.4, 0.4) * size
        box = [min(x0, x1), min(y0, y1), max(x0, x1), max(y0, y1)]
        width = max(1, round(size / 48))
        kind = int(rng.integers(3))
        if kind == 0:
            draw.line([x0, y0, x1, y1], fill=colour, width=width)
        elif kind == 1:
            draw.ellipse(box, outline=colour, width=width)
        else:
            draw.rectangle(box, outline=colour, width=width)


def _place_motif(image: Image.Image, motif: str, scale: float, rng: np.random.Generator) -> None:
    """Draw ``motif`` (2x supersampled) with colour jitter, flip, rotation, scale and position jitter."""
    size = image.width
    side = max(8, round(scale * size))
    brightness = rng.uniform(0.8, 1.15)
    colours = [_jitter(rgb, rng, 18.0, brightness) for rgb in MOTIF_PALETTES[motif]]
    layer = Image.new("RGBA", (2 * side, 2 * side), (0, 0, 0, 0))
    MOTIF_PAINTERS[motif](ImageDraw.Draw(layer), 2 * side, colours)
    if rng.random() < 0.5:
        layer = layer.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    layer = layer.rotate(rng.uniform(-25, 25), resample=Image.Resampling.BICUBIC, expand=True)
    layer = layer.resize((max(1, layer.width // 2), max(1, layer.height // 2)), Image.Resampling.LANCZOS)
    centre_x, centre_y = (size / 2 + rng.uniform(-0.22, 0.22, 2) * size).tolist()
    image.paste(layer, (round(centre_x - layer.width / 2), round(centre_y - layer.height / 2)), mask=layer)


def _accent(image: Image.Image, topic: str, rng: np.random.Generator) -> None:
    """The topic's small accent mark (a weak cue, like a recurring logo or colour in a section's photos)."""
    colour, shape = TOPIC_CUES[topic]
    fill = _jitter(colour, rng, 12.0, 1.0)
    size = image.width
    side = rng.uniform(0.08, 0.14) * size
    x, y = (float(v) for v in rng.uniform(0, size - side, 2))
    draw = ImageDraw.Draw(image)
    if shape == "dot":
        draw.ellipse([x, y, x + side, y + side], fill=fill)
    elif shape == "square":
        draw.rectangle([x, y, x + side, y + side], fill=fill)
    elif shape == "triangle":
        draw.polygon([(x, y + side), (x + side, y + side), (x + side / 2, y)], fill=fill)
    else:
        half = side / 2
        draw.polygon([(x + half, y), (x + side, y + half), (x + half, y + side), (x, y + half)], fill=fill)


def render_image(topic: str, motif: str, size: int, rng: np.random.Generator) -> Image.Image:
    """One picture for a pair of ``topic`` whose dominant motif is ``motif`` (RGB, ``size`` x ``size``).

    The motif is shared with other topics; what is specific to the topic is weak: a background tint and,
    with probability ``ACCENT_PROBABILITY``, a small accent mark. Clutter, a smaller distractor motif,
    jitter and noise keep the mapping from pixels to topic hard.
    """
    if topic not in TOPIC_CUES or motif not in MOTIF_PAINTERS:
        raise KeyError(f"unknown topic {topic!r} or motif {motif!r}; see TOPICS and MOTIFS in {__package__}")
    image = _background(topic, size, rng)
    _clutter(image, rng)
    if rng.random() < DISTRACTOR_PROBABILITY:
        others = tuple(m for m in MOTIF_PAINTERS if m != motif)
        _place_motif(image, pick(rng, others), rng.uniform(0.18, 0.3), rng)
    _place_motif(image, motif, rng.uniform(0.45, 0.8), rng)
    if rng.random() < ACCENT_PROBABILITY:
        _accent(image, topic, rng)
    pixels = np.asarray(image, dtype=float) + rng.normal(0.0, 4.0, (size, size, 3))
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), mode="RGB")
