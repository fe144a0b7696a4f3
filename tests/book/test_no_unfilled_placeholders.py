"""No sentence in the book shows a format field instead of its number.

A plain string glued to f-strings by implicit concatenation keeps its braces literal: chapter
5's running case once printed ``{c.output_median:,.0f}`` where the median belonged. This test
finds such literal fields in every code cell of every chapter.
"""

from __future__ import annotations

import io
import json
import re
import tokenize
from pathlib import Path

import pytest

BOOK = Path(__file__).resolve().parents[2] / "book"
# {name}, {obj.attr}, {call(...)}, {x[i]}, each with an optional :format spec
FIELD = re.compile(r"\{[A-Za-z_][\w.]*(\([^{}]*\)|\[[^{}]*\])*(![rsa])?(:[^{}]*)?\}")


def literal_fields(source: str) -> list[str]:
    """Format fields written in a plain string that is glued to an f-string (IPython magics
    dropped): Python prints those braces as they are."""
    code = "\n".join("" if line.lstrip().startswith(("%", "!")) else line
                     for line in source.splitlines())
    found: list[str] = []
    group: list[str] = []  # the string tokens of one implicit concatenation

    def close() -> None:
        prefixes = [t[:t.index(t[-1])].lower() for t in group]
        if any("f" in p for p in prefixes):
            for tok, prefix in zip(group, prefixes, strict=True):
                if "f" not in prefix:
                    found.extend(m.group(0) for m in FIELD.finditer(tok))
        group.clear()

    for tok in tokenize.generate_tokens(io.StringIO(code).readline):
        if tok.type == tokenize.STRING:
            group.append(tok.string)
        elif tok.type not in (tokenize.NL, tokenize.COMMENT):
            close()
    close()
    return found


def test_the_detector_finds_a_plain_string_among_f_strings() -> None:
    assert literal_fields('x = 1\ns = (f"a {x} " "b {x:,.0f} " f"c")') == ["{x:,.0f}"]
    assert literal_fields('x = 1\ns = f"a {x} {{x}} b" "$B_{max}$"') == ["{max}"]
    assert literal_fields('s = "a {x} b"') == []  # a plain string alone may hold braces


@pytest.mark.parametrize("notebook", sorted(BOOK.glob("*.ipynb")), ids=lambda p: p.stem)
def test_no_format_field_is_left_unfilled(notebook: Path) -> None:
    cells = json.loads(notebook.read_text())["cells"]
    bad = [(i, f) for i, c in enumerate(cells) if c["cell_type"] == "code"
           for f in literal_fields("".join(c["source"]))]
    assert not bad, f"{notebook.name}: cells with literal format fields {bad}"
