"""Axis helpers shared by the figures: log axes whose every tick carries a label."""

from __future__ import annotations

from collections.abc import Callable


def nice_log_ticks(lo: float, hi: float) -> list[int]:
    """1-2-5 ticks from just below ``lo`` to just above ``hi`` (both > 0)."""
    ticks, decade = [], 1
    while decade * 10 <= lo:
        decade *= 10
    while True:
        for m in (1, 2, 5):
            v = m * decade
            if v >= lo / 2.5 and (not ticks or ticks[-1] < hi):
                ticks.append(v)
        if ticks and ticks[-1] >= hi:
            return ticks
        decade *= 10


def log_axis(ticks: list[int], fmt: Callable[[int], str] = "{:,}".format) -> dict[str, object]:
    """A plotly log axis that labels each of ``ticks`` (plotly's own log ticks leave most
    of theirs unlabelled)."""
    return {"type": "log", "tickmode": "array", "tickvals": list(ticks),
            "ticktext": [fmt(t) for t in ticks]}
