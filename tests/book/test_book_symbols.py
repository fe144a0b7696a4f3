"""A letter keeps its meaning across the book: chapter 6's kernel symbols do not reuse the
single letters earlier chapters gave other meanings ($f$ mem_fraction_static, $R$ the
admission room, $q$ the pipeline-parallel size, $n$ the requests that stay)."""

from __future__ import annotations

import json
import re
from pathlib import Path

BOOK = Path(__file__).resolve().parents[2] / "book"
TAKEN = ("f", "R", "q", "n")


def math_spans(name: str) -> list[str]:
    cells = json.loads((BOOK / f"{name}.ipynb").read_text())["cells"]
    text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    return re.findall(r"\$(?!\s)([^$\n]+?)(?<!\s)\$", text)


def bare_letters(span: str) -> set[str]:
    """Single-letter symbols of a TeX span: not part of a command, a word or a subscript."""
    return set(re.findall(r"(?<![\\A-Za-z_{])([A-Za-z])(?![A-Za-z_])", span))


def test_bare_letters_finds_a_letter_and_skips_commands_and_subscripts() -> None:
    assert bare_letters(r"S f T / \lambda") == {"S", "f", "T"}
    assert bare_letters(r"f_\mathrm{clk} \cdot n_c") == set()
    assert bare_letters(r"\mathbf{q} K^\top") == {"K"}


def test_earlier_chapters_do_use_the_letters_chapter_6_avoids() -> None:
    earlier = set().union(*(bare_letters(s) for p in sorted(BOOK.glob("0[1-5]-*.ipynb"))
                            for s in math_spans(p.stem)))
    assert set(TAKEN) <= earlier


def test_chapter_6_does_not_reuse_earlier_chapters_letters() -> None:
    used = {letter: span for span in math_spans("06-kernel") for letter in bare_letters(span)}
    assert not set(TAKEN) & set(used), {k: used[k] for k in set(TAKEN) & set(used)}
