"""The reference pages' tables render as tables: every row of the glossary, the cheat sheet's
tables and the release table has its header's number of cells, and no backtick is left
unpaired in a cell (a ``|`` inside a code span once split the glossary's backend row)."""

from __future__ import annotations

import re

import pytest
from markdown_it import MarkdownIt

from pagedkv_widgets.reference import constants_md, defaults_md, formulas_md, glossary_md, releases_md
from pagedkv_widgets.tables import markdown_table

TABLES = {"glossary": glossary_md, "constants": constants_md, "formulas": formulas_md,
          "defaults": defaults_md, "releases": releases_md}


def rendered_rows(markdown: str) -> list[list[str]]:
    """Each table row's cells, as markdown-it (the book's parser) renders them, in text."""
    tokens = MarkdownIt("commonmark").enable("table").parse(markdown)
    rows, cells, depth = [], [], 0
    for tok in tokens:
        if tok.type == "tr_open":
            cells = []
        elif tok.type in ("td_open", "th_open"):
            depth, text = 1, []
        elif tok.type == "inline" and depth:
            text.append("".join(c.content for c in tok.children or ()))
        elif tok.type in ("td_close", "th_close"):
            depth = 0
            cells.append("".join(text))
        elif tok.type == "tr_close":
            rows.append(cells)
    return rows


@pytest.mark.parametrize("name", TABLES)
def test_every_row_has_its_cells_and_no_stray_backtick(name: str) -> None:
    source = TABLES[name]().data
    width = len(source.splitlines()[0].strip("|").split(" | "))
    rows = rendered_rows(source)
    assert len(rows) == len(source.splitlines()) - 1
    for row in rows:
        assert len(row) == width, (name, row)
        for cell in row:
            assert "`" not in cell, (name, cell)


def test_a_pipe_in_a_code_span_stays_in_its_cell() -> None:
    rows = rendered_rows(markdown_table(("flag", "what"), [("`--a x|y`", "b")]).data)
    assert rows[1] == ["--a x|y", "b"]
    assert re.search(r"x\\\|y", markdown_table(("a",), [("x|y",)]).data)
