"""Every SGLang location the book's tables name exists in the release it is given for.

The cheat sheet and chapters 3 and 5 print SGLang files and functions from three records:

- each behaviour field of :class:`pagedkv.release_behaviours.Release` (``source``: 0.5.23's
  ``file.py: Name`` or ``file.py: Name, Name``; the cheat sheet's "where in 0.5.23" column);
- each scheduler constant of :data:`pagedkv.lessons.cheat_sheet.CONSTANTS` (``source``:
  backticked files and names, 0.5.23's, with ``(0.5.9: ...)`` where 0.5.9's differ and
  ``0.5.9 has none`` for a constant 0.5.9 lacks), and its environment variable, which must
  be declared in ``environ.py``;
- each attention backend of :data:`pagedkv.lessons.attention_backends.BACKENDS` that the
  release offers (``source``: its file, the same path in both releases).

Here each location is looked up in the SGLang tree installed in this interpreter: the file
must exist, and each name must be defined in it (a function, class or module-level
assignment; ``Class.method`` a method of that class). The sources are read as text, parsed
with ``ast``, never imported. A location of the other release is not checked here; the other
reference venv checks it.
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import fields
from functools import cache
from pathlib import Path

import sgl_boot

sgl_boot.require()

import compare  # noqa: E402
import pytest  # noqa: E402

from pagedkv.lessons.attention_backends import BACKENDS  # noqa: E402
from pagedkv.lessons.cheat_sheet import CONSTANTS, SGLANG_NAME  # noqa: E402
from pagedkv.release_behaviours import Release  # noqa: E402
from pagedkv.releases import RELEASES  # noqa: E402

AREA = "source locations"
NEWEST = "0.5.23"  # the release Release.source and the un-bracketed constant paths name


SGLANG = Path(sys.modules["sglang"].__path__[0])  # sgl_boot's shell of the installed package


@cache
def defined_names(path: Path) -> frozenset[str]:
    """Functions, classes, ``Class.method`` and module-level assignments defined in ``path``."""
    names: set[str] = set()
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names.add(node.name)
            names.update(f"{node.name}.{m.name}" for m in node.body
                         if isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef))
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AnnAssign) else []
        names.update(t.id for t in targets if isinstance(t, ast.Name))
    return frozenset(names)


def sglang_file(rel: str) -> Path:
    """``rel`` (``managers/scheduler.py``, or with ``python/sglang/``, ``srt/`` in front) under
    the installed SGLang; the srt tree unless the path says otherwise."""
    rel = rel.removeprefix("python/sglang/")
    return SGLANG / (rel if rel.startswith(("srt/", "kernels/")) else "srt/" + rel)


def check(files: list[str], names: list[str], what: str) -> None:
    """Each file exists; each name is defined in one of them."""
    paths = [sglang_file(f) for f in files]
    missing = [str(p.relative_to(SGLANG)) for p in paths if not p.is_file()]
    compare.same(AREA, missing, [], f"{what}: files missing from SGLang {sgl_boot.VERSION}")
    defined = set().union(*(defined_names(p) for p in paths)) if paths else set()
    compare.same(AREA, [n for n in names if n not in defined], [],
                 f"{what}: names not defined in {', '.join(files)} (SGLang {sgl_boot.VERSION})")


def release_locations() -> list[tuple[str, list[str], list[str]]]:
    """``(field, [file], [names])`` per behaviour field (0.5.23 locations)."""
    out = []
    for f in fields(Release):
        if f.name == "name":
            continue
        file, _, names = f.metadata["source"].partition(": ")
        out.append((f.name, [file], [n for n in names.split(", ") if n]))
    return out


def constant_locations(release: str) -> list[tuple[str, list[str], list[str]]]:
    """``(constant, [files], [names])`` that ``release`` should have, from the backticked
    parts of each constant's source: outside ``(0.5.9: ...)`` for 0.5.23, and for 0.5.9 those
    brackets plus every part without one; nothing for 0.5.9 where it "has none"."""
    out = []
    for c in CONSTANTS:
        if release != NEWEST and "0.5.9 has none" in c.source:
            continue
        files: list[str] = []
        names: list[str] = []
        # a "; " inside brackets does not end a part
        parts = re.split(r";\s(?![^()]*\))", c.source)
        for part in parts:
            older = re.search(r"\(0\.5\.9: ([^()]*)\)", part)
            if release == NEWEST:
                text = re.sub(r"\([^()]*\)", "", part)
            else:
                text = older.group(1) if older else re.sub(r"\([^()]*\)", "", part)
            for token in re.findall(r"`([^`]+)`", text):
                (files if token.endswith(".py") else names).append(token)
        out.append((c.field, files, names))
    return out


def backend_locations(release: str) -> list[tuple[str, list[str], list[str]]]:
    offered = RELEASES[release].attention_backends
    return [(b.name, [b.source], []) for b in BACKENDS.values() if b.name in offered]


def test_the_parsers_read_what_the_records_say() -> None:
    """The locations this module checks are the ones the tables show (a parser that read
    nothing would pass every check)."""
    assert ("group_prefill_frees", ["managers/scheduler_components/batch_result_processor.py"],
            ["SchedulerBatchResultProcessor.process_batch_result_prefill"]) in release_locations()
    assert ("forced_page_sizes", ["arg_groups/overrides.py"],
            ["_mla_backend_page_constraints", "_fa4_page_constraint"]) in release_locations()
    new = dict((k, (f, n)) for k, f, n in constant_locations("0.5.23"))
    old = dict((k, (f, n)) for k, f, n in constant_locations("0.5.9"))
    assert new["init_new_token_ratio"][0] == [
        "python/sglang/srt/environ.py", "managers/scheduler_components/new_token_ratio_tracker.py"]
    assert old["init_new_token_ratio"][0] == ["python/sglang/srt/environ.py",
                                              "managers/scheduler.py"]
    assert new["min_new_token_ratio_factor"][1] == ["NewTokenRatioTracker"]
    assert old["min_new_token_ratio_factor"] == (
        ["python/sglang/srt/environ.py", "managers/scheduler.py"], ["Scheduler.__init__"])
    assert "swa_eviction_interval" in new and "swa_eviction_interval" not in old
    assert new["clip_max_new_tokens"] == old["clip_max_new_tokens"] == (
        ["python/sglang/srt/environ.py", "managers/schedule_policy.py"], ["CLIP_MAX_NEW_TOKENS"])


@pytest.mark.skipif(sgl_boot.VERSION != NEWEST, reason="Release.source names 0.5.23's files")
@pytest.mark.parametrize("loc", release_locations(), ids=lambda loc: loc[0])
def test_release_field_sources(loc: tuple[str, list[str], list[str]]) -> None:
    check(loc[1], loc[2], f"Release.{loc[0]}")


@pytest.mark.parametrize("loc", constant_locations(sgl_boot.VERSION or NEWEST),
                         ids=lambda loc: loc[0])
def test_cheat_sheet_constant_sources(loc: tuple[str, list[str], list[str]]) -> None:
    check(loc[1], loc[2], f"constant {loc[0]}")
    # the table's first column, the variable SGLang reads, is declared where it says
    environ = sglang_file("environ.py")
    if "python/sglang/srt/environ.py" in loc[1]:
        compare.same(AREA, bool(re.search(rf"\b{SGLANG_NAME[loc[0]]}\b", environ.read_text())),
                     True, f"{SGLANG_NAME[loc[0]]} in environ.py (SGLang {sgl_boot.VERSION})")


@pytest.mark.parametrize("loc", backend_locations(sgl_boot.VERSION or NEWEST),
                         ids=lambda loc: loc[0])
def test_attention_backend_sources(loc: tuple[str, list[str], list[str]]) -> None:
    check(loc[1], loc[2], f"backend {loc[0]}")
