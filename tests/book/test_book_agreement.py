"""The book agrees with itself: terms defined before their first use, one running case, one
value for each constant and each formula wherever it appears, every release-specific statement
next to its release, and "On your GPU" sections that say when their numbers mean nothing."""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

import pytest
import torch

from pagedkv.lessons import on_gpu_memory, on_gpu_serving
from pagedkv.lessons.cheat_sheet import CONSTANTS, constant_rows
from pagedkv.lessons.glossary import LENGTHS, NEWEST_TOKEN_RULE, TERMS
from pagedkv.lessons.on_gpu import Report, Setup
from pagedkv.managers.config import ENV_VARS, SchedulerConfig
from pagedkv.workloads.cases import LONG_ANSWERS

ROOT = Path(__file__).resolve().parents[2]
BOOK = ROOT / "book"
CHAPTERS = tuple(sorted(p.stem for p in BOOK.glob("[0-9][0-9]-*.ipynb")))
PAGES = ("cheat-sheet", "glossary")


def cells(name: str) -> list[dict]:
    return json.loads((BOOK / f"{name}.ipynb").read_text())["cells"]


def text_of(cell: dict) -> str:
    return "".join(cell["source"])


def prose(name: str) -> list[str]:
    """Markdown paragraphs and list items, and whole code cells (their prose is in strings)."""
    out = []
    for c in cells(name):
        if c["cell_type"] == "markdown":
            out += [p for p in re.split(r"\n\s*\n|\n- |\n\d\. ", text_of(c)) if p.strip()]
        else:
            out.append(text_of(c))
    return [" ".join(p.split()) for p in out]


def test_the_reference_pages_are_in_the_toc_around_the_chapters() -> None:
    toc = [line.split("book/")[1] for line in (ROOT / "_toc.yml").read_text().splitlines()
           if "file: book/" in line]
    assert toc == ["cheat-sheet", *CHAPTERS, "glossary"]


def test_terms_are_not_used_before_the_chapter_that_defines_them() -> None:
    for term in TERMS:
        for chapter in CHAPTERS[:term.chapter - 1]:
            used = [p[:120] for p in prose(chapter) if re.search(term.pattern, p, re.IGNORECASE)]
            assert not used, (term.name, chapter, used)


def test_chapter_1_lists_its_terms_before_using_them() -> None:
    """The list (terms_md(1)) comes right after the chapter's opening; no earlier cell uses a
    term the list defines, the opening's 'what you will learn' aside."""
    ch1 = cells(CHAPTERS[0])
    at = next(k for k, c in enumerate(ch1) if "terms_md(1)" in text_of(c))
    opening = next(k for k, c in enumerate(ch1) if text_of(c).startswith("# 1."))
    assert at == opening + 2
    first_words = [t for t in TERMS if t.chapter == 1 and t.listed
                   and t.name not in ("KV cache", "`mem_fraction_static`")]
    before = " ".join(text_of(c) for c in ch1[1:opening + 1])
    assert [t.name for t in first_words if re.search(t.pattern, before, re.IGNORECASE)] == []


def test_one_name_for_each_length() -> None:
    """mini-sglang's names appear only where mini-sglang is named; the rule is chapter 1's."""
    assert {t.name for t in LENGTHS} == {"`seq_len`", "`kv_len`", "`prefix_len`", "`extend_input_len`"}
    for chapter in CHAPTERS:
        for para in prose(chapter):
            if re.search(r"cached_len|device_len", para) and "=" not in para[:60]:
                assert "mini-sglang" in para, (chapter, para[:200])
    assert "kv_len` = `seq_len` - 1" in NEWEST_TOKEN_RULE
    for chapter in ("03-paging", "04-admission", "05-retraction"):
        assert any("chapter 1's rule" in p.lower() for p in prose(chapter)), chapter


def test_one_running_case_in_every_chapter() -> None:
    """Every visualizer chapter that can show the running case's model and card shows it at
    the case's fraction, so its pool, queue and retractions are one set of numbers."""
    from pagedkv_widgets.catalog import CATALOG
    from pagedkv_widgets.chapters import CHAPTERS as VIEWS
    from pagedkv_widgets.chapters import chapter_config, resolve_settings

    for name, spec in VIEWS.items():
        axes = chapter_config(CATALOG, name, resolve_settings(CATALOG, name))["axes"]
        if spec.teaching or LONG_ANSWERS.model not in [m for m, _ in axes["model"]]:
            continue  # chapter 9's hybrids: no menu leads to the case
        s = resolve_settings(CATALOG, name, model=LONG_ANSWERS.model, gpu=LONG_ANSWERS.gpu)
        assert s.mem_fraction_static == LONG_ANSWERS.mem_fraction_static, name


def test_typed_constants_agree_with_the_package() -> None:
    """Where prose names an SGLANG_* variable with a value, or the retraction ratio's
    per-request tokens, the value is pagedkv's default."""
    cfg = SchedulerConfig()
    for name in (*CHAPTERS, *PAGES):
        for para in prose(name):
            for var, value in re.findall(r"`(SGLANG_[A-Z_]+)`\s*\((\d[\d.,]*)\)", para):
                field = ENV_VARS[var]
                assert float(value.replace(",", "")) == float(getattr(cfg, field)), (name, var, value)
            for n in re.findall(r"\\sum \\text\{decoded\} \+ (\d+)", para):
                assert int(n) == cfg.retract_decode_steps, (name, para[:200])


def test_gb_and_gib_differ_by_one_number() -> None:
    ch1 = " ".join(prose(CHAPTERS[0]))
    quoted = set(re.findall(r"differ by (?:those )?([\d.]+) %", ch1))
    assert quoted == {f"{(2**30 / 10**9 - 1) * 100:.1f}"}


RELEASE_SPECIFIC = ("#pending-token", "finishing in flight", "evict_to_free_tokens",
                    "--cuda-graph-max-bs-decode", "extra page", "padding row",
                    "evicts only what", "slots for each",
                    # the third read's findings: each differs between the releases
                    "front of the free list", "keeps the queue waiting", "the tree evicts first",
                    "ties to the longer prompt", "keeps at least", "for its prefill graphs")


@pytest.mark.parametrize("name", (*CHAPTERS, *PAGES))
def test_release_specific_statements_name_their_release(name: str) -> None:
    for para in prose(name):
        for words in RELEASE_SPECIFIC:
            if words in para:
                assert re.search(r"0\.5\.(9|23)|sglang_version|releases_md", para), (name, words, para[:200])


# A clause that names gpt-oss and a backend: its backend rule, which differs by GPU and release
GPT_OSS_BACKEND = re.compile(r"gpt-oss[^.;)]*\b(Triton|FA3|FA4|TRT-LLM|FlashInfer|aiter|Hopper|Blackwell)\b")


@pytest.mark.parametrize("name", (*CHAPTERS, *PAGES))
def test_gpt_oss_s_backend_rule_is_printed_from_the_one_function(name: str) -> None:
    """Chapters 3 and 6 once disagreed on gpt-oss's backend on the RTX 5090 (sm_120, Blackwell,
    Triton): every place that says which backend gpt-oss gets prints gpt_oss_rule_words()."""
    for para in prose(name):
        if GPT_OSS_BACKEND.search(para):
            assert "gpt_oss_rule_words()" in para, (name, para[:300])
    if name in ("03-paging", "06-kernel"):
        assert any("gpt_oss_rule_words()" in p for p in prose(name)), name


def test_retraction_is_described_alike_everywhere() -> None:
    """Who goes first, and what a retraction frees, say the same in chapters 5 and 7."""
    for name in CHAPTERS:
        for para in prose(name):
            if re.search(r"frees (their|its) KV", para):
                assert "radix cache" in para or "tree" in para, (name, para[:200])
            assert "fewest first" not in para and "charged for prompts only" not in para, name
    ch5 = " ".join(prose("05-retraction"))
    assert "pops victims from its end" in ch5 and "--disable-radix-cache" in ch5
    ch7 = " ".join(prose("07-visualizer"))
    for words in ("evictable tokens", "clipped", "one more page", "the $n$ requests that stay"):
        assert words in ch7, words


def test_chapter_1_tells_the_log_s_request_count_as_a_release_difference() -> None:
    ch1 = " ".join(prose(CHAPTERS[0]))
    assert "had one padding row more" not in ch1 and "fixed in that thread by more GPUs" not in ch1
    assert "does not count it" in ch1


def test_every_constant_has_a_reason_and_a_source() -> None:
    assert {c.field for c in CONSTANTS} == set(ENV_VARS.values())
    rows = constant_rows()
    cfg = SchedulerConfig()
    for c, (var, value, _gives, why, source) in zip(CONSTANTS, rows, strict=True):
        assert ENV_VARS[var.strip("`")] == c.field
        assert float(value.replace(",", "")) == float(getattr(cfg, c.field))
        assert why and "environ.py" in source
        assert not re.search(r"\d", c.role), c.field  # values are computed, never typed
    half = constant_rows(SchedulerConfig(clip_max_new_tokens=512))
    assert half[0][1] == "512"


def _tiny() -> Setup:
    return Setup(torch.device("cpu"), torch.float32, None, "tiny", "CPU")


def test_cpu_sections_say_which_numbers_mean_nothing() -> None:
    from pagedkv_widgets.on_gpu import report_md

    text = report_md(Report(_tiny(), ["a line"], meaningless="The times mean nothing.")).data
    assert text.startswith("> **Not a GPU run.**") and "The times mean nothing." in text
    real = Setup(torch.device("cpu"), torch.float32, "x", "real", "GPU")
    assert not report_md(Report(real, ["a line"], meaningless="x")).data.startswith(">")
    for module in (on_gpu_memory, on_gpu_serving):
        for name, fn in inspect.getmembers(module, inspect.isfunction):
            src = inspect.getsource(fn)
            if fn.__module__ == module.__name__ and "return Report(" in src:
                assert src.count("return Report(") == src.count("meaningless="), name


@pytest.mark.parametrize("name", CHAPTERS)
def test_on_your_gpu_texts_promise_the_note(name: str) -> None:
    for para in prose(name):
        if "Without a GPU" in para and "tiny random" in para:
            assert "numbers that then mean nothing" in para, name


RESERVATION = re.compile(r"\\text\{generated\}|remaining `max_new_tokens`, clipped")


@pytest.mark.parametrize("name", CHAPTERS)
def test_the_reservation_formula_comes_with_its_ignore_eos_exception(name: str) -> None:
    """Where a chapter first gives a running request's reservation, the next cell states the
    release-specific ignore-EOS exception, generated from ``Release.ignore_eos_reserves_all``."""
    cs = cells(name)
    at = next((k for k, c in enumerate(cs) if RESERVATION.search(text_of(c))
               and "new_token_ratio" in text_of(c)), None)
    if at is None:
        return
    assert "ignore_eos_rule(" in text_of(cs[at + 1]), (name, at)


def test_the_ignore_eos_rule_is_read_from_the_releases(monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import replace

    from pagedkv.lessons import glossary, glossary_rules
    from pagedkv.releases import RELEASES
    from pagedkv_widgets.reference import formulas_md

    said = glossary.ignore_eos_rule("it")
    assert said.startswith("One exception, in SGLang 0.5.23: it is reserved at ratio 1.0")
    assert "SGLang 0.5.9 reserves it at ratio `new_token_ratio`" in said
    assert glossary.IGNORE_EOS_RULE in next(t.definition for t in TERMS if t.name == "reserved")
    row = next(line for line in formulas_md().data.splitlines() if "a running request's reservation" in line)
    assert glossary.ignore_eos_rule("an ignore-EOS request") in row
    flipped = {n: replace(r, ignore_eos_reserves_all=not r.ignore_eos_reserves_all)
               for n, r in RELEASES.items()}
    monkeypatch.setattr(glossary_rules, "RELEASES", flipped)
    assert glossary.ignore_eos_rule("it").startswith(
        "One exception, in SGLang 0.5.9: it is reserved at ratio 1.0")
    monkeypatch.setattr(glossary_rules, "RELEASES", {n: replace(r, ignore_eos_reserves_all=False)
                                                     for n, r in RELEASES.items()})
    assert glossary.ignore_eos_rule("it") == "Every release reserves it like the others."


def test_the_cheat_sheet_gives_max_running_requests_for_each_release() -> None:
    from pagedkv.releases import RELEASES, describe
    from pagedkv.sizing import plan_pool
    from pagedkv_widgets.reference import defaults_md

    row = next(line for line in defaults_md().data.splitlines() if "--max-running-requests" in line)
    for name, r in RELEASES.items():
        part = row.split(f"SGLang {name}: ")[1].split(". SGLang")[0]
        plan = plan_pool(LONG_ANSWERS.model, gpu=LONG_ANSWERS.gpu, sglang_version=r,
                         mem_fraction_static=LONG_ANSWERS.mem_fraction_static)
        assert part.startswith(f"{plan.max_running_requests:,} for "), part
        for field in ("req_rows_from_final_pool", "cap_running_at_half_pool"):
            assert describe(r, field) in part, (name, field)


TIMED = re.compile(r"tokens?/s\b|tokens per second|\bms\b|microsecond|millisecond|GB/s|TB/s")
SOURCED = re.compile(r"model|measur|roofline|CPU|datasheet|peak|predict|at least|fastest possible|"
                     r"shortest possible|round figure", re.IGNORECASE)


@pytest.mark.parametrize("name", (*CHAPTERS, *PAGES))
def test_a_time_or_throughput_says_where_it_came_from(name: str) -> None:
    """A step time, a kernel time or a throughput reads like a GPU measurement unless its
    paragraph says what it is: the roofline model, a bound from the card's peaks, a CPU run or
    a recorded measurement."""
    for para in prose(name):
        if TIMED.search(para):
            assert SOURCED.search(para), (name, para[:300])
    text = " ".join(prose(name))
    assert "really gets" not in text and "it takes microseconds" not in text


def test_cpu_log_lines_say_their_throughput_is_the_cpus() -> None:
    from pagedkv_widgets.on_gpu import report_md

    line = "Prefill batch, #new-seq: 1, input throughput (token/s): 98.33"
    cpu = report_md(Report(_tiny(), ["a line"], log=[line], meaningless="x")).data
    assert "CPU-run" in cpu.split("```text")[0]
    real = Setup(torch.device("cpu"), torch.float32, "x", "real", "GPU")
    assert "CPU-run" not in report_md(Report(real, ["a line"], log=[line])).data


def test_computed_start_up_lines_are_labelled_computed() -> None:
    """Chapter 9's start-up lines read like a server's log: every block of them goes through
    the chapter's ``startup``, which labels it computed by pagedkv, not captured."""
    code = [text_of(c) for c in cells("09-todays-models") if c["cell_type"] == "code"]
    assert any("not captured" in c and "def startup" in c for c in code)
    for c in code:
        for line in c.splitlines():
            if re.search(r"log_lines\(\)|sizing_lines", line) and "def startup" not in c:
                assert line.lstrip().startswith("startup("), line


def test_start_up_blocks_say_the_gpus_and_fraction_they_were_computed_for(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A start-up block is one GPU's lines: on eight H200s it must say so, and which
    ``mem_fraction_static`` it was computed at (chapter 9's multi-GPU blocks said neither)."""
    import ast

    from pagedkv.lessons.todays_models import example_plan

    code = next(text_of(c) for c in cells("09-todays-models") if "def startup" in text_of(c))
    tree = ast.parse(code)
    defn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "startup")
    namespace: dict = {}
    exec(compile(ast.Module([defn], []), "startup", "exec"), namespace)
    for name, label in (("deepseek-v3", "each of 8 GPUs (tp 8)"), ("gpt-oss-120b", "one GPU")):
        plan = example_plan(name)
        namespace["startup"](plan)
        first, *lines = capsys.readouterr().out.splitlines()
        assert first.startswith(f"[{label}, mem_fraction_static {plan.mem_fraction_static:.3f}: "), first
        assert "not captured" in first
        assert lines == plan.log_lines()


def test_a_request_s_swa_footprint_is_told_one_way() -> None:
    """A sliding-window request needs w + 1 tokens of the SWA pool and holds up to
    SGLANG_SWA_EVICTION_INTERVAL more between releases (maybe_evict_swa frees in batches): a
    total or bound built on w + 1 alone is no upper bound (chapter 9 once said "at most w + 1
    ... in all" beside "up to 128 more"), and the request cap's per-request budget comes from
    the one function that computes it."""
    texts = [(n, p) for n in (*CHAPTERS, *PAGES) for p in prose(n)]
    texts += [("glossary", f"{t.name}: {t.definition}") for t in TERMS]
    told = 0
    for name, text in texts:
        text = re.sub(r'"\s*f?"', "", text)  # a code cell's adjacent string literals, joined
        if re.search(r"SWA pool|sliding-window pool", text) and re.search(r"\bw \+ 1|window \+ 1", text):
            told += 1
            assert "SGLANG_SWA_EVICTION_INTERVAL" in text, (name, text[:200])
            assert not re.search(r"at most \$?(w|window) \+ 1", text), (name, text[:200])
    assert told >= 2  # chapter 9's worked example and the glossary's SWA pool
    ch9 = "\n".join(text_of(c) for c in cells("09-todays-models"))
    assert "swa_tokens_per_request(" in ch9 and "2 * oss.page_size" not in ch9


def test_advice_on_schedule_conservativeness_reads_chapter_4_s_runs() -> None:
    """Chapter 4's table shows retractions that do not fall steadily as the setting rises;
    advice to raise it elsewhere (chapter 5's misconception) must come from the same runs,
    not be typed as a flat rule."""
    import inspect

    from pagedkv.lessons.examples import conservativeness_retractions, conservativeness_runs

    for name in (*CHAPTERS, *PAGES):
        for c in cells(name):
            if c["cell_type"] == "markdown":
                text = " ".join(text_of(c).split()).lower()
                assert not re.search(r"raise `?--schedule-conservativeness", text), (name, text[:200])
    ch5 = "\n".join(text_of(c) for c in cells("05-retraction"))
    assert "conservativeness_retractions()" in ch5 and "--schedule-conservativeness" in ch5
    ch4 = "\n".join(text_of(c) for c in cells("04-admission"))
    runs = re.search(r"conservativeness_runs\((\([^)]*\))?\)", ch4)
    assert runs is not None
    # chapter 4's table and chapter 5's advice run the same settings
    same = inspect.signature(conservativeness_retractions).parameters["values"].default
    assert same == inspect.signature(conservativeness_runs).parameters["values"].default
    assert runs.group(1) in (None, str(same)), runs.group(1)


@pytest.mark.parametrize("name", CHAPTERS)
def test_a_log_field_the_text_points_at_was_quoted_before(name: str) -> None:
    """"The log's `max_running_requests=2049`" sends the reader back to the log: the field
    must be among the lines the chapter quoted earlier (chapter 1 once compared with a field
    of SGLang's documentation log that its quote of that log left out)."""
    paragraphs = prose(name)
    for k, text in enumerate(paragraphs):
        for field in re.findall(r"[Tt]he log's `([^`]+=[^`]+)`", text):
            earlier = " ".join(paragraphs[:k]) + text.split(f"log's `{field}`")[0]
            assert f"`{field}`" in earlier, (name, field)


@pytest.mark.parametrize("name", CHAPTERS)
def test_a_run_s_opening_step_is_quoted_with_where_it_opens(name: str) -> None:
    """Each run opens the visualizer at its own step (a few steps before its own first
    retraction): a text that quotes a run's opening step says where that is, so two runs
    compared at different steps (chapter 7's loops, once 5,116 and 5,114 unexplained) read
    as what they are."""
    for c in cells(name):
        code = text_of(c)
        if c["cell_type"] != "code" or "loop_facts(" not in code:
            continue
        quoted = set(re.findall(r"\{(\w+)\.step\b", code))
        assert quoted, name
        for facts in quoted:
            assert f"{{{facts}.opens_where}}" in code, (name, facts)
