"""The compile table shipped with pagedkv is the one for the current kernel sources (a fresh
clone's chapter 6 reads it instead of compiling; test_kernel_compiles.py holds its rows equal
to a fresh compile)."""

from __future__ import annotations

import json

from pagedkv.lessons.kernel.compile_matrix import SHIPPED, compile_matrix, table_name
from pagedkv.lessons.kernel.compiled import TARGETS


def test_one_shipped_table_and_it_matches_the_sources() -> None:
    names = sorted(p.name for p in SHIPPED.glob("compiled-*.json"))
    assert names == [table_name()], (
        "the kernel sources changed: run python -m pagedkv.lessons.kernel.compile_matrix --ship")


def test_the_shipped_table_is_read_without_compiling(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PAGEDKV_CACHE", str(tmp_path))  # an empty cache, as on a fresh clone
    rows = compile_matrix()
    assert rows == json.loads((SHIPPED / table_name()).read_text())
    assert {r["arch"] for r in rows} == set(TARGETS)
    assert not list(tmp_path.iterdir())  # nothing compiled, nothing written
