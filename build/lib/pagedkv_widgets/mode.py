"""Static or live: is this code running inside the book build?

The book's Sphinx extension (``book/_ext/pagedkv_book.py``) sets ``PAGEDKV_BOOK_BUILD=1``,
and the kernels that execute the notebooks inherit it. No browser talks to those kernels, so
a widget would be dead in the built page; the visualizer emits static HTML there instead.
"""

from __future__ import annotations

import os

from pagedkv_widgets.budget import BOOK_BUILD_ENV


def in_book_build() -> bool:
    """True while the book builds (``PAGEDKV_BOOK_BUILD`` is set and not ``0``)."""
    return os.environ.get(BOOK_BUILD_ENV, "") not in ("", "0")
