"""Bounds the built pages state hold for the tables beside them (the built book: ``BOOK``).

A lower bound printed to one decimal must be rounded down: chapter 6 once said the issue roof
was "at least 2.9 times the memory roof" where its own table gave the H200 13,725 / 4,800 =
2.86.
"""

from __future__ import annotations

import re

import pytest
from browser_support import BOOK
from bs4 import BeautifulSoup

KERNEL = BOOK / "book" / "06-kernel.html"


def _number(text: str) -> float:
    return float(text.split()[0].replace(",", ""))


@pytest.mark.skipif(not KERNEL.exists(), reason=f"no built book under {BOOK} (build the book first)")
def test_chapter_6_s_lower_bound_on_the_issue_roof_holds_for_its_table() -> None:
    article = BeautifulSoup(KERNEL.read_text(), "html.parser").select_one(".bd-article")
    text = " ".join(article.get_text(" ").split())
    said = re.search(r"tensor cores \(([^)]*)\) the issue roof is at least ([\d.]+) times", text)
    assert said, "chapter 6 no longer states its bound"
    names = re.split(r", | and ", said.group(1))
    table = next(t for t in article.find_all("table")
                 if "issue roof" in [th.get_text(" ", strip=True) for th in t.find_all("th")])
    head = [th.get_text(" ", strip=True) for th in table.find_all("th")]
    ratios = {}
    for tr in table.find_all("tr")[1:]:
        cells = [td.get_text(" ", strip=True) for td in tr.find_all("td")]
        ratios[cells[0]] = (_number(cells[head.index("issue roof")])
                            / _number(cells[head.index("memory roof")]))
    shown = [label for label in ratios if any(label in name or name in label for name in names)]
    assert len(shown) == len(names), (names, list(ratios))
    assert float(said.group(2)) <= min(ratios[label] for label in shown)
