"""A PNG of the scale simulation's curves, drawn with pillow (matplotlib is not in the venv).

One panel per measure: each series is a line over the network sizes (x on a log scale), solid
for what was measured and dashed for its model (log N growth fitted at the smallest size).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from PIL import Image, ImageDraw

PANEL_W, PANEL_H, MARGIN = 520, 330, 60
COLOURS = ((31, 119, 180), (214, 39, 40), (44, 160, 44), (148, 103, 189))


@dataclass(frozen=True)
class Series:
    label: str
    values: Sequence[float]
    dashed: bool = False


@dataclass(frozen=True)
class Panel:
    title: str
    unit: str
    series: Sequence[Series]
    sizes: Sequence[int] = ()  # its own x values (e.g. group sizes); none: the figure's


def draw(path: Path, sizes: Sequence[int], panels: Sequence[Panel], *, columns: int = 2) -> None:
    columns = max(1, min(columns, len(panels)))
    rows = -(-len(panels) // columns)
    image = Image.new("RGB", (PANEL_W * columns, PANEL_H * rows), "white")
    pen = ImageDraw.Draw(image)
    for index, panel in enumerate(panels):
        left, top = (index % columns) * PANEL_W, (index // columns) * PANEL_H
        _panel(pen, left, top, panel.sizes or sizes, panel)
    image.save(path)


def _panel(
    pen: ImageDraw.ImageDraw, left: int, top: int, sizes: Sequence[int], panel: Panel
) -> None:
    x0, y0 = left + MARGIN, top + PANEL_H - MARGIN  # the origin, bottom left
    width, height = PANEL_W - 2 * MARGIN + 20, PANEL_H - 2 * MARGIN
    finite = [v for s in panel.series for v in s.values if math.isfinite(v)]
    top_value = max(finite, default=1.0) * 1.15 or 1.0
    lo, hi = math.log(min(sizes)), math.log(max(sizes))

    def point(n: int, v: float) -> tuple[float, float]:
        fx = (math.log(n) - lo) / (hi - lo) if hi > lo else 0.5
        return x0 + fx * width, y0 - v / top_value * height

    pen.text((left + MARGIN, top + 12), f"{panel.title} ({panel.unit})", fill="black")
    for n in sizes:
        x, _ = point(n, 0)
        pen.line([(x, y0), (x, y0 + 4)], fill="black")
        pen.text((x - 14, y0 + 8), f"{n:,}", fill="black")
    for k in range(5):
        value = top_value * k / 4
        _, y = point(sizes[0], value)
        pen.text((left + 6, y - 6), f"{value:.3g}", fill="black")
        pen.line([(x0, y), (x0 + width, y)], fill=(230, 230, 230))
    pen.line([(x0, y0), (x0 + width, y0)], fill="black")
    pen.line([(x0, y0), (x0, y0 - height)], fill="black")
    for index, series in enumerate(panel.series):
        colour = COLOURS[index % len(COLOURS)]
        points = [
            point(n, v) for n, v in zip(sizes, series.values, strict=True) if math.isfinite(v)
        ]
        _polyline(pen, points, colour, dashed=series.dashed)
        for x, y in points:
            pen.ellipse([x - 3, y - 3, x + 3, y + 3], outline=colour)
        pen.text((x0 + 8, top + 30 + 14 * index), series.label, fill=colour)


def _polyline(pen: ImageDraw.ImageDraw, points, colour, *, dashed: bool) -> None:
    for (ax, ay), (bx, by) in zip(points, points[1:], strict=False):
        if not dashed:
            pen.line([(ax, ay), (bx, by)], fill=colour, width=2)
            continue
        steps = max(1, int(math.hypot(bx - ax, by - ay) // 8))
        for k in range(0, steps, 2):
            f, g = k / steps, min(1.0, (k + 1) / steps)
            pen.line(
                [
                    (ax + (bx - ax) * f, ay + (by - ay) * f),
                    (ax + (bx - ax) * g, ay + (by - ay) * g),
                ],
                fill=colour,
                width=2,
            )
