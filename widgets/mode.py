"""Static or live: is this code running inside a book build?

A book build executes notebooks in a kernel no browser talks to, so a widget would be
dead there; the visualizer emits static HTML instead. ``PAGEDKV_STATIC=1`` (or ``0``)
decides explicitly; otherwise the kernel's parent process tells: ``jupyter-book`` and
``sphinx-build`` run the build, while JupyterLab, Notebook, VS Code and Colab run kernels
that a browser is attached to.
"""

from __future__ import annotations

import os
from pathlib import Path

BUILDERS = ("jupyter-book", "sphinx-build", "jupyter_book", "sphinx.cmd.build")


def parent_command() -> str:
    """The command line of this process's parent (empty where /proc is missing)."""
    try:
        return Path(f"/proc/{os.getppid()}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def in_book_build() -> bool:
    """True inside a Jupyter Book / Sphinx build, or when ``PAGEDKV_STATIC=1``."""
    forced = os.environ.get("PAGEDKV_STATIC")
    if forced in ("0", "1"):
        return forced == "1"
    command = parent_command()
    return any(builder in command for builder in BUILDERS)
