"""A number the book shows says what it counts: a table column read at one step names that
step, a budget's every term is explained at the page size of the example, and a count from a
run other than the running case names its run wherever it is quoted."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

BOOK = Path(__file__).resolve().parents[2] / "book"
CHAPTERS = tuple(sorted(p.stem for p in BOOK.glob("[0-9][0-9]-*.ipynb")))


def cells(name: str) -> list[dict]:
    return json.loads((BOOK / f"{name}.ipynb").read_text())["cells"]


def text_of(cell: dict) -> str:
    return "".join(cell["source"])


def sections(name: str) -> list[list[dict]]:
    """The chapter's cells cut at each "## " heading (a markdown cell with one starts a section)."""
    out: list[list[dict]] = [[]]
    for c in cells(name):
        if c["cell_type"] == "markdown" and re.search(r"^## ", text_of(c), re.MULTILINE):
            out.append([])
        out[-1].append(c)
    return out


def test_the_page_size_table_s_peak_columns_name_their_step() -> None:
    """Chapter 3's table once showed "slots held / with tokens at peak" 192 / 52 at p = 64
    beside 61 tokens at p = 1 and "the tokens are the same for every p": the peak was the
    first step that held the most pages, which p = 64 reaches at its first step. The step is
    now a column, and a line defines the columns and says why the tokens there differ."""
    from pagedkv.lessons.on_gpu_memory import peak_note

    note = peak_note([(1, 4, 5, 61, 61), (16, 4, 5, 6, 61), (64, 1, 5, 3, 52)])
    for column in ("Peak pages:", "Peak at step:", "Slots held / with a token then:"):
        assert column in note
    assert "at p = 64 the run holds its 3 pages from step 1, when 52 tokens" in note
    assert "at p = 1 the peak comes at step 4, with 61" in note
    assert "differ" not in peak_note([(1, 4, 5, 61, 61), (16, 4, 5, 6, 61)])


def test_the_page_size_table_on_the_cpu_defines_what_it_shows() -> None:
    pytest.importorskip("transformers")
    import pagedkv.layers.attention  # noqa: F401  (first: sets TRITON_INTERPRET on a CPU)
    from pagedkv.lessons.on_gpu import detect_setup
    from pagedkv.lessons.on_gpu_memory import page_sizes

    report = page_sizes(detect_setup(device="cpu"))
    col = {name: k for k, name in enumerate(report.header)}
    text = " ".join(report.lines)
    for name in report.header:
        if re.search(r"peak|then", name):
            assert f"{name[0].upper()}{name[1:]}:" in text, name
    tokens = {row[col["slots held / with a token then"]].split(" / ")[1] for row in report.rows}
    steps = {row[col["peak at step"]] for row in report.rows}
    assert len(tokens) == 1 or len(steps) > 1  # tokens there differ only where the step does
    assert "the tokens are the same" not in text and "generated tokens are the same" in text
    md = " ".join(text_of(c) for c in cells("03-paging") if c["cell_type"] == "markdown")
    assert "the first step that held them" in " ".join(md.split())


def test_the_swa_request_cap_explains_each_term_at_the_example_s_page_size() -> None:
    """Chapter 9 once explained the cap's 257 = 256 + 1 as "a page of padding that keeps the
    release point on a page boundary (pages of 1 token here)", which explains nothing at
    1-token pages. compute_swa_request_cap (0.5.23) adds a padding page at every page size and
    a page for the next token (the +1 of w + 1): the text names both, and says at 1-token pages
    that the padding is not needed."""
    from pagedkv.hybrid_pools import SWA_EVICTION_INTERVAL, swa_tokens_per_request

    w = 127
    most = w + 1 + SWA_EVICTION_INTERVAL  # what a request may hold between releases
    assert swa_tokens_per_request(page_size=1, window=w) - most == 1  # the padding page
    assert swa_tokens_per_request(page_size=16, window=w) - most == 2 * 16 - 1
    doc = " ".join((swa_tokens_per_request.__doc__ or "").split())
    assert "decode_alloc" in doc and "padding page" in doc and "not needed" in doc
    cap = [text_of(c) for c in cells("09-todays-models")
           if c["cell_type"] == "code" and "SWARequestCapPoolConfigurator" in text_of(c)]
    assert cap
    for text in cap:
        text = re.sub(r'"\s*f?"', "", " ".join(text.split()))  # adjacent literals, joined
        assert "swa_tokens_per_request(" in text
        assert "a page for the next token" in text and "a padding page" in text
        assert "+1 of $w$ + 1" in text and "it is not needed" in text
        assert "oss.page_size == 1" in text  # the 1-token clause is chosen by the page size
        assert "padding that keeps the release point" not in text


# Cells that quote a count from chapter 4's conservativeness runs (LONG_UNIFORM); ``runs[``
# and ``base`` only once ``runs = conservativeness_runs(`` has bound them.
CONSERVATIVENESS_COUNT = re.compile(r"conservativeness_(retractions|runs|table)\(")
BOUND_COUNT = re.compile(r"\bbase_ret\b|\bruns\[|\bbase\.metrics\.num_retractions")


@pytest.mark.parametrize("name", CHAPTERS)
def test_a_count_from_the_conservativeness_runs_names_its_run(name: str) -> None:
    """Chapter 4's "The same workload at four settings" (35 retractions at the default 1) came
    right after the running case's 6 retractions at the same default, and chapter 5 quoted it
    as "chapter 4's runs of one workload": the table is the capped H100 run. Wherever a count
    from those runs is quoted, a cell of the same section, at or before it, names the run with
    LONG_UNIFORM.label()."""
    from pagedkv.lessons.examples import LONG_UNIFORM

    assert LONG_UNIFORM.label().startswith(f"{LONG_UNIFORM.requests:,}-request ")
    bound, quoted = False, 0
    for section in sections(name):
        named = False
        for c in section:
            text = text_of(c)
            bound = bound or "runs = conservativeness_runs(" in text
            if c["cell_type"] != "code":
                assert "same workload" not in text.lower(), (name, text[:200])
                continue
            named = named or bool(re.search(r"\b(lr|LONG_UNIFORM)\.label\(\)", text))
            if CONSERVATIVENESS_COUNT.search(text) or (bound and BOUND_COUNT.search(text)):
                quoted += 1
                assert named, (name, text[:200])
    if name in ("04-admission", "05-retraction"):  # where the runs are quoted
        assert quoted >= (4 if name == "04-admission" else 1)
        assert "runs of one workload" not in "\n".join(text_of(c) for c in cells(name))
