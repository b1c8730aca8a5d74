"""What each motif looks like: a palette and a painter drawing in unit coordinates on a square layer.

The painters draw only; :mod:`data_recipes.embedded.drawing` jitters their colours, flips, rotates, scales
and places the layer, so every motif gets the same treatment.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from PIL import ImageDraw

Colour = tuple[int, int, int, int]
MotifPainter = Callable[[ImageDraw.ImageDraw, float, list[Colour]], None]

#: motif -> base colours (RGB) before jitter.
MOTIF_PALETTES: dict[str, tuple[tuple[int, int, int], ...]] = {
    "scales": ((190, 150, 40), (120, 90, 30), (220, 190, 90)),
    "protest_sign": ((240, 240, 225), (130, 90, 50), (30, 30, 30)),
    "medical_cross": ((210, 30, 40), (250, 250, 250), (170, 20, 30)),
    "rainbow": ((220, 40, 40), (240, 150, 30), (60, 150, 220)),
    "columns": ((225, 220, 205), (160, 155, 145), (120, 115, 105)),
    "fence": ((110, 110, 115), (70, 70, 75), (150, 150, 155)),
    "flag": ((200, 30, 45), (245, 245, 245), (30, 50, 130)),
    "target": ((210, 30, 30), (245, 245, 245), (30, 30, 30)),
    "badge": ((210, 170, 40), (40, 60, 120), (240, 210, 90)),
    "podium": ((120, 70, 35), (40, 40, 40), (200, 170, 120)),
    "globe": ((40, 110, 200), (60, 160, 70), (230, 240, 250)),
    "factory": ((110, 90, 80), (90, 90, 95), (190, 190, 190)),
    "bar_chart": ((40, 120, 200), (230, 120, 40), (40, 40, 40)),
    "book": ((150, 40, 40), (245, 240, 225), (60, 60, 60)),
    "screen": ((40, 40, 45), (80, 170, 230), (160, 160, 165)),
}


def _scaled(points: list[tuple[float, float]], s: float) -> list[tuple[float, float]]:
    return [(x * s, y * s) for x, y in points]


def _paint_scales(d: ImageDraw.ImageDraw, s: float, c: list[Colour]) -> None:
    w = max(1, round(s * 0.05))
    d.line(_scaled([(0.5, 0.12), (0.5, 0.85)], s), fill=c[1], width=w)
    d.polygon(_scaled([(0.3, 0.92), (0.7, 0.92), (0.5, 0.82)], s), fill=c[1])
    d.line(_scaled([(0.12, 0.25), (0.88, 0.25)], s), fill=c[0], width=w)
    for x in (0.2, 0.8):
        d.line(_scaled([(x, 0.25), (x - 0.1, 0.55)], s), fill=c[0], width=max(1, w // 2))
        d.line(_scaled([(x, 0.25), (x + 0.1, 0.55)], s), fill=c[0], width=max(1, w // 2))
        d.chord([(x - 0.14) * s, 0.45 * s, (x + 0.14) * s, 0.65 * s], 0, 180, fill=c[2])
    d.ellipse(_scaled([(0.45, 0.08), (0.55, 0.18)], s), fill=c[2])


def _paint_protest_sign(d: ImageDraw.ImageDraw, s: float, c: list[Colour]) -> None:
    d.line(_scaled([(0.5, 0.55), (0.5, 0.98)], s), fill=c[1], width=max(1, round(s * 0.06)))
    d.rectangle(
        _scaled([(0.12, 0.1), (0.88, 0.6)], s), fill=c[0], outline=c[1], width=max(1, round(s * 0.02))
    )
    for row, length in ((0.22, 0.6), (0.34, 0.5), (0.46, 0.55)):
        d.line(_scaled([(0.2, row), (0.2 + length, row)], s), fill=c[2], width=max(1, round(s * 0.05)))


def _paint_medical_cross(d: ImageDraw.ImageDraw, s: float, c: list[Colour]) -> None:
    d.ellipse(
        _scaled([(0.05, 0.05), (0.95, 0.95)], s), fill=c[1], outline=c[2], width=max(1, round(s * 0.04))
    )
    d.rectangle(_scaled([(0.38, 0.18), (0.62, 0.82)], s), fill=c[0])
    d.rectangle(_scaled([(0.18, 0.38), (0.82, 0.62)], s), fill=c[0])


def _paint_rainbow(d: ImageDraw.ImageDraw, s: float, c: list[Colour]) -> None:
    bands = (c[0], c[1], (240, 220, 40, 255), (60, 170, 70, 255), c[2], (120, 60, 170, 255))
    width = max(1, round(s * 0.06))
    for i, colour in enumerate(bands):
        inset = 0.05 + i * 0.06
        d.arc(
            [inset * s, (0.2 + inset) * s, (1 - inset) * s, (1.2 - inset) * s],
            180,
            360,
            fill=colour,
            width=width,
        )


def _paint_columns(d: ImageDraw.ImageDraw, s: float, c: list[Colour]) -> None:
    d.polygon(_scaled([(0.08, 0.3), (0.92, 0.3), (0.5, 0.08)], s), fill=c[0], outline=c[2])
    d.rectangle(_scaled([(0.1, 0.3), (0.9, 0.36)], s), fill=c[1])
    for x in (0.16, 0.34, 0.52, 0.7):
        d.rectangle(_scaled([(x, 0.36), (x + 0.1, 0.8)], s), fill=c[0], outline=c[2])
    d.rectangle(_scaled([(0.06, 0.8), (0.94, 0.88)], s), fill=c[1])
    d.rectangle(_scaled([(0.02, 0.88), (0.98, 0.95)], s), fill=c[2])


def _paint_fence(d: ImageDraw.ImageDraw, s: float, c: list[Colour]) -> None:
    w = max(1, round(s * 0.05))
    for x in (0.1, 0.3, 0.5, 0.7, 0.9):
        d.line(_scaled([(x, 0.2), (x, 0.95)], s), fill=c[1], width=w)
    for y in (0.4, 0.7):
        d.line(_scaled([(0.05, y), (0.95, y)], s), fill=c[0], width=max(1, w // 2))
    zigzag = [(0.05 + 0.1 * i, 0.1 if i % 2 else 0.2) for i in range(10)]
    d.line(_scaled(zigzag, s), fill=c[2], width=max(1, w // 2))


def _paint_flag(d: ImageDraw.ImageDraw, s: float, c: list[Colour]) -> None:
    d.line(_scaled([(0.1, 0.05), (0.1, 0.98)], s), fill=(90, 90, 90, 255), width=max(1, round(s * 0.04)))
    for i in range(7):
        top = 0.1 + i * 0.07
        d.rectangle(_scaled([(0.12, top), (0.92, top + 0.07)], s), fill=c[0] if i % 2 == 0 else c[1])
    d.rectangle(_scaled([(0.12, 0.1), (0.45, 0.38)], s), fill=c[2])


def _paint_target(d: ImageDraw.ImageDraw, s: float, c: list[Colour]) -> None:
    for i, radius in enumerate((0.45, 0.35, 0.25, 0.15, 0.06)):
        d.ellipse(
            _scaled([(0.5 - radius, 0.5 - radius), (0.5 + radius, 0.5 + radius)], s),
            fill=c[0] if i % 2 == 0 else c[1],
        )
    w = max(1, round(s * 0.02))
    d.line(_scaled([(0.5, 0.0), (0.5, 1.0)], s), fill=c[2], width=w)
    d.line(_scaled([(0.0, 0.5), (1.0, 0.5)], s), fill=c[2], width=w)


def _paint_badge(d: ImageDraw.ImageDraw, s: float, c: list[Colour]) -> None:
    d.ellipse(_scaled([(0.05, 0.05), (0.95, 0.95)], s), fill=c[1])
    star = []
    for k in range(10):
        radius = 0.4 if k % 2 == 0 else 0.17
        angle = -math.pi / 2 + k * math.pi / 5
        star.append((0.5 + radius * math.cos(angle), 0.5 + radius * math.sin(angle)))
    d.polygon(_scaled(star, s), fill=c[0], outline=c[2])


def _paint_podium(d: ImageDraw.ImageDraw, s: float, c: list[Colour]) -> None:
    d.polygon(_scaled([(0.22, 0.45), (0.78, 0.45), (0.7, 0.98), (0.3, 0.98)], s), fill=c[0])
    d.rectangle(_scaled([(0.18, 0.4), (0.82, 0.47)], s), fill=c[2])
    d.line(_scaled([(0.5, 0.4), (0.58, 0.15)], s), fill=c[1], width=max(1, round(s * 0.03)))
    d.ellipse(_scaled([(0.53, 0.07), (0.65, 0.19)], s), fill=c[1])
    d.ellipse(_scaled([(0.42, 0.62), (0.58, 0.78)], s), outline=c[2], width=max(1, round(s * 0.02)))


def _paint_globe(d: ImageDraw.ImageDraw, s: float, c: list[Colour]) -> None:
    d.ellipse(_scaled([(0.08, 0.08), (0.92, 0.92)], s), fill=c[0])
    d.ellipse(_scaled([(0.25, 0.25), (0.5, 0.55)], s), fill=c[1])
    d.ellipse(_scaled([(0.55, 0.45), (0.78, 0.8)], s), fill=c[1])
    w = max(1, round(s * 0.015))
    for inset in (0.3, 0.42):
        d.ellipse(_scaled([(inset, 0.08), (1 - inset, 0.92)], s), outline=c[2], width=w)
    for y in (0.3, 0.5, 0.7):
        d.line(_scaled([(0.1, y), (0.9, y)], s), fill=c[2], width=w)


def _paint_factory(d: ImageDraw.ImageDraw, s: float, c: list[Colour]) -> None:
    d.rectangle(_scaled([(0.05, 0.55), (0.95, 0.95)], s), fill=c[0])
    saw = [(0.05, 0.55), (0.2, 0.42), (0.2, 0.55), (0.35, 0.42), (0.35, 0.55), (0.5, 0.42), (0.5, 0.55)]
    d.polygon(_scaled(saw, s), fill=c[0])
    for x in (0.62, 0.78):
        d.rectangle(_scaled([(x, 0.2), (x + 0.08, 0.55)], s), fill=c[1])
    for i, (x, y) in enumerate(((0.68, 0.12), (0.76, 0.05), (0.86, 0.1))):
        radius = 0.06 + 0.02 * i
        d.ellipse(_scaled([(x - radius, y - radius), (x + radius, y + radius)], s), fill=c[2])
    for x in (0.15, 0.3, 0.45):
        d.rectangle(_scaled([(x, 0.68), (x + 0.08, 0.78)], s), fill=(230, 210, 120, 255))


def _paint_bar_chart(d: ImageDraw.ImageDraw, s: float, c: list[Colour]) -> None:
    w = max(1, round(s * 0.03))
    d.line(_scaled([(0.1, 0.05), (0.1, 0.92), (0.95, 0.92)], s), fill=c[2], width=w)
    for i, height in enumerate((0.3, 0.5, 0.42, 0.7, 0.82)):
        left = 0.16 + i * 0.16
        d.rectangle(_scaled([(left, 0.9 - height), (left + 0.11, 0.9)], s), fill=c[0] if i % 2 == 0 else c[1])
    d.line(
        _scaled([(0.2, 0.55), (0.38, 0.38), (0.55, 0.45), (0.72, 0.2), (0.9, 0.08)], s), fill=c[2], width=w
    )


def _paint_book(d: ImageDraw.ImageDraw, s: float, c: list[Colour]) -> None:
    d.polygon(
        _scaled([(0.05, 0.25), (0.5, 0.32), (0.95, 0.25), (0.95, 0.85), (0.5, 0.92), (0.05, 0.85)], s),
        fill=c[0],
    )
    d.polygon(_scaled([(0.09, 0.22), (0.49, 0.29), (0.49, 0.86), (0.09, 0.8)], s), fill=c[1])
    d.polygon(_scaled([(0.51, 0.29), (0.91, 0.22), (0.91, 0.8), (0.51, 0.86)], s), fill=c[1])
    w = max(1, round(s * 0.015))
    for k in range(4):
        y = 0.36 + k * 0.11
        d.line(_scaled([(0.14, y), (0.44, y + 0.04)], s), fill=c[2], width=w)
        d.line(_scaled([(0.56, y + 0.04), (0.86, y)], s), fill=c[2], width=w)


def _paint_screen(d: ImageDraw.ImageDraw, s: float, c: list[Colour]) -> None:
    d.rectangle(_scaled([(0.15, 0.12), (0.85, 0.62)], s), fill=c[0])
    d.rectangle(_scaled([(0.19, 0.16), (0.81, 0.58)], s), fill=c[1])
    w = max(1, round(s * 0.02))
    for k in range(3):
        y = 0.25 + k * 0.1
        d.line(_scaled([(0.25, y), (0.25 + 0.45 - 0.1 * k, y)], s), fill=c[0], width=w)
    d.polygon(_scaled([(0.1, 0.66), (0.9, 0.66), (1.0, 0.86), (0.0, 0.86)], s), fill=c[2])
    d.line(_scaled([(0.35, 0.79), (0.65, 0.79)], s), fill=c[0], width=w)


MOTIF_PAINTERS: dict[str, MotifPainter] = {
    "scales": _paint_scales,
    "protest_sign": _paint_protest_sign,
    "medical_cross": _paint_medical_cross,
    "rainbow": _paint_rainbow,
    "columns": _paint_columns,
    "fence": _paint_fence,
    "flag": _paint_flag,
    "target": _paint_target,
    "badge": _paint_badge,
    "podium": _paint_podium,
    "globe": _paint_globe,
    "factory": _paint_factory,
    "bar_chart": _paint_bar_chart,
    "book": _paint_book,
    "screen": _paint_screen,
}
