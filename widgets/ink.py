"""Text that reads on a coloured fill: black or white, whichever contrasts more.

WCAG 2's relative luminance; for any fill one of the two reaches at least 4.58:1, above the
4.5:1 that AA asks of text. A translucent fill is first made opaque over white, so that the
fill and its text look the same on a light and a dark page.
"""

from __future__ import annotations

from plotly.colors import hex_to_rgb

DARK, LIGHT = "#111111", "#ffffff"


def _luminance(rgb: tuple[float, float, float]) -> float:
    def channel(v: float) -> float:
        v /= 255
        return v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4

    r, g, b = (channel(v) for v in rgb)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a: tuple[float, float, float], b: tuple[float, float, float]) -> float:
    """WCAG contrast ratio of two sRGB colours (1 to 21)."""
    hi, lo = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def tint(hex_colour: str, alpha: float) -> str:
    """``hex_colour`` at ``alpha`` over white, as an opaque ``rgb(...)``."""
    r, g, b = (round(c * alpha + 255 * (1 - alpha)) for c in hex_to_rgb(hex_colour))
    return f"rgb({r}, {g}, {b})"


def ink_on(fill: str) -> str:
    """:data:`DARK` or :data:`LIGHT`, whichever reads better on ``fill`` (``#rrggbb`` or
    ``rgb(r, g, b)``)."""
    rgb = (hex_to_rgb(fill) if fill.startswith("#")
           else tuple(float(v) for v in fill[fill.index("(") + 1:-1].split(",")[:3]))
    dark, light = hex_to_rgb(DARK), hex_to_rgb(LIGHT)
    return DARK if contrast(rgb, dark) >= contrast(rgb, light) else LIGHT
