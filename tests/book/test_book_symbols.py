"""A letter keeps its meaning across the book: chapter 6's kernel symbols do not reuse the
single letters earlier chapters gave other meanings ($f$ mem_fraction_static, $R$ the
admission room, $q$ the pipeline-parallel size, $p$ the page size, $n$ the requests that stay).
A first read met chapter 6's softmax weights as $p$ and took them for the page size."""

from __future__ import annotations

import json
import re
from pathlib import Path

BOOK = Path(__file__).resolve().parents[2] / "book"
TAKEN = ("f", "R", "q", "p", "n")


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


def test_chapter_6_says_which_letters_it_renames() -> None:
    """The chapter's note on its symbols names every letter it avoids, and its softmax weights
    are the capital $P$ (defined where the second matrix product first names them)."""
    cells = json.loads((BOOK / "06-kernel.ipynb").read_text())["cells"]
    text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    note = re.search(r"the single letters\s+([^.]*?), which earlier chapters use", text)
    assert note and set(re.findall(r"\b[A-Za-z]\b", note.group(1))) == set(TAKEN), note
    assert "$P$: the tile's softmax weights" in " ".join(text.split())
