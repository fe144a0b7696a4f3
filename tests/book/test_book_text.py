"""The book's text against pagedkv: it names the SGLang release, cites 0.5.23's files (0.5.9's
only beside them), takes its shared numbers from the one function that computes them, and uses
no words from outside the book."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pagedkv.releases import DEFAULT_SGLANG_VERSION, SGLANG_VERSIONS

BOOK = Path(__file__).resolve().parents[2] / "book"
CHAPTERS = tuple(sorted(p.stem for p in BOOK.glob("[0-9][0-9]-*.ipynb")))
PAGES = ("cheat-sheet", "glossary")  # generated reference pages, held to the same rules


def cells(chapter: str, kind: str) -> list[str]:
    nb = json.loads((BOOK / f"{chapter}.ipynb").read_text())
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == kind]


def paragraphs(chapter: str) -> list[str]:
    """Markdown paragraphs and list items, and whole code cells (their prose is in strings)."""
    out = []
    for text in cells(chapter, "markdown"):
        out += [p for p in re.split(r"\n\s*\n|\n- |\n\d\. ", text) if p.strip()]
    return out + cells(chapter, "code")


def test_intro_names_the_release_the_book_follows() -> None:
    intro = (BOOK / "intro.md").read_text()
    assert f"follows SGLang {DEFAULT_SGLANG_VERSION}" in intro
    assert all(f'sglang_version="{v}"' in intro for v in SGLANG_VERSIONS)
    assert "What SGLang does" in intro and "0.5.9 location beside them" in intro


def test_every_chapter_is_checked() -> None:
    assert len(CHAPTERS) == 9 and CHAPTERS[0] == "01-memory-arithmetic"
    assert sorted(p.stem for p in BOOK.glob("*.ipynb")) == sorted((*CHAPTERS, *PAGES))


OUTSIDE_WORDS = ("seed note", "the seed's", "seed_page_table", "public report", "operators report",
                 "users report", "users running", "operators of", "public observation",
                 "the report's", "observation_workload", "observed:")


@pytest.mark.parametrize("chapter", (*CHAPTERS, *PAGES))
def test_no_words_from_outside_the_book(chapter: str) -> None:
    text = " ".join(" ".join(cells(chapter, "markdown") + cells(chapter, "code")).lower().split())
    for words in OUTSIDE_WORDS:
        assert words not in text, (chapter, words)


def test_intro_has_no_words_from_outside_the_book() -> None:
    text = " ".join((BOOK / "intro.md").read_text().lower().split())
    assert not [w for w in OUTSIDE_WORDS if w in text]


def shared_numbers() -> set[int]:
    """Pools the book quotes in several places: the running case's (both page sizes, and at
    SGLang 0.5.23's own default fraction) and the H100 Llama-3-8B pool of chapter 1."""
    from pagedkv.sizing import plan_pool
    from pagedkv.workloads.cases import LONG_ANSWERS

    case = {LONG_ANSWERS.plan(page_size=p).max_total_num_tokens for p in (1, 16)}
    case.add(plan_pool(LONG_ANSWERS.model, gpu=LONG_ANSWERS.gpu).max_total_num_tokens)
    return case | {plan_pool("llama-3-8b", gpu="h100-sxm-80gb", sglang_version=v).max_total_num_tokens
                   for v in SGLANG_VERSIONS}


@pytest.mark.parametrize("chapter", (*CHAPTERS, *PAGES))
def test_shared_numbers_are_computed_not_typed(chapter: str) -> None:
    text = " ".join(cells(chapter, "markdown") + cells(chapter, "code"))
    for n in shared_numbers():
        assert all(form not in text for form in (f"{n:,}", f"{n:_}", str(n))), (chapter, n)


# Names and paths that exist only in 0.5.9 (or in neither release): a paragraph may use one
# only next to the release it belongs to.
OLD_ONLY = ("srt/mem_cache/allocator.py", "triton_ops/", "cache_finished_req", "cache_unfinished_req",
            "scheduler_runtime_checker_mixin", "/radix_cache.py", "`RadixCache`", "cutlass_mla")


@pytest.mark.parametrize("chapter", (*CHAPTERS, *PAGES))
def test_sglang_paths_are_0_5_23_with_0_5_9_beside_them(chapter: str) -> None:
    for para in paragraphs(chapter):
        assert "adjust_max_prefix_ids" not in para
        for old in OLD_ONLY:
            if old in para:
                assert "0.5.9" in para, (chapter, old, para[:200])
        assert "python/sglang/srt/layers/attention/triton_ops" not in para or "0.5.9" in para


@pytest.mark.parametrize("chapter", ["03-paging", "06-kernel"])
def test_flashinfer_is_not_called_page_indexed(chapter: str) -> None:
    text = " ".join(" ".join(p.split()) for p in paragraphs(chapter))
    for wrong in (r"\(FlashInfer, FA3\)", r"FlashInfer and FlashAttention-3 read one page id",
                  r"FlashInfer, FlashAttention-3\)", r"`flashinfer_backend\.py` hand their kernels"):
        assert not re.search(wrong, text), (chapter, wrong)
    assert "page size 1" in text and "fallback" in text


def test_chapters_2_and_3_measure_one_workload() -> None:
    for chapter in ("02-fragmentation", "03-paging"):
        code = "\n".join(cells(chapter, "code"))
        assert "fragmentation_workload()" in code and "sharegpt_like(" not in code


def test_chapter_2_counts_its_own_example() -> None:
    from pagedkv.lessons.scenarios import CONTIGUOUS_FINISHING, CONTIGUOUS_REQUESTS, contiguous_story

    heading = next(t for t in cells("02-fragmentation", "markdown") if "## Worked example" in t)
    assert not re.search(r"\d|\b(one|two|three|four|five)\b", heading)
    code = "\n".join(cells("02-fragmentation", "code"))
    assert "len(names)" in code and "CONTIGUOUS_REQUESTS" in code and "len(mem.runs)" in code
    mem, frames = contiguous_story()
    assert len(frames) == len(CONTIGUOUS_REQUESTS) + len(CONTIGUOUS_FINISHING)
    assert len(mem.runs) == len(CONTIGUOUS_REQUESTS) - len(CONTIGUOUS_FINISHING)


def test_chapter_3_teaching_pool_comes_from_the_visualizer() -> None:
    from pagedkv_widgets.catalog import CATALOG
    from pagedkv_widgets.chapters import resolve_settings
    from pagedkv_widgets.scenes import teaching_tokens
    from pagedkv_widgets.teaching import teaching_pool

    teach = teaching_pool("paging")
    assert teach.tokens == teaching_tokens(resolve_settings(CATALOG, "paging").mem_fraction_static)
    for run in teach.runs:
        assert run.pool_tokens == teach.tokens // run.page_size * run.page_size
        assert run.pages == run.pool_tokens // run.page_size
    # No chapter-3 prose types a teaching-pool size: each comes from teaching_tokens.
    sizes = {str(teaching_tokens(resolve_settings(CATALOG, ch).mem_fraction_static))
             for ch in ("paging", "retraction", "full")}
    for text in cells("03-paging", "markdown"):
        assert not any(re.search(rf"\b{s}\b", text) for s in sizes), text[:200]
    assert 'teaching_pool("paging")' in "\n".join(cells("03-paging", "code"))


def test_chapter_8_token_usage_is_sglangs() -> None:
    text = " ".join(" ".join(p.split()) for p in paragraphs("08-prefix-sharing"))
    assert r"(\text{max_total_num_tokens} - \text{available} - \text{evictable}) / " in text
    assert "evictable tree tokens count as free" in text
    assert "#6778" in text  # the misconception's source


def test_the_running_case_medians_print_alike_everywhere() -> None:
    """Chapters 1, 4 and 7 take the busy workload's medians from pagedkv_widgets.facts,
    chapter 5 prints numpy's median with :.0f: the same request set, the same numbers."""
    import numpy as np

    from pagedkv.lessons.examples import long_answers_workload
    from pagedkv.workloads.cases import LONG_ANSWERS
    from pagedkv_widgets.facts import workload_facts

    facts = workload_facts("busy")
    specs = long_answers_workload(LONG_ANSWERS.busy_rate, seed=0)
    assert f"{np.median([s.output_len for s in specs]):.0f}" == str(facts.output_median)
    assert f"{np.median([s.prompt_len for s in specs]):.0f}" == str(facts.prompt_median)


@pytest.mark.parametrize("chapter", (*CHAPTERS, *PAGES))
def test_no_markdown_cell_is_tagged_to_hide(chapter: str) -> None:
    """hide-cell/hide-input tags act on code cells only: on a markdown cell (an exercise's
    answer) they do nothing and the answer shows. A dropdown admonition hides prose."""
    nb = json.loads((BOOK / f"{chapter}.ipynb").read_text())
    tagged = [c for c in nb["cells"] if c["cell_type"] == "markdown"
              and {"hide-cell", "hide-input", "hide-output"} & set(c.get("metadata", {}).get("tags", []))]
    assert tagged == []


def typed_phrases() -> list[str]:
    """Phrases a fourth first read found typed into Markdown although pagedkv holds their
    numbers: each is now printed by a cell that reads the value."""
    from pagedkv.configs.model_presets import load_model
    from pagedkv.gpus import get_gpu
    from pagedkv.lessons.analysis import EPISODE_GAP_STEPS
    from pagedkv.lessons.kernel.roofline import MAX_REGISTERS_PER_THREAD, target_gpus
    from pagedkv.lessons.on_gpu_memory import CPU_CARD_MIB
    from pagedkv.lessons.on_gpu_serving import GPU_SYSTEM_PROMPT_LEN
    from pagedkv.lessons.prefix_examples import CHAT_POOL, SUPPORT_SYSTEM_LEN, TIGHT_POOL
    from pagedkv.managers.config import SchedulerConfig
    from pagedkv.workloads.cases import LONG_ANSWERS
    from pagedkv.workloads.synthetic import SHAREGPT_MEAN_PROMPT

    llama = load_model("llama-3-8b")
    sms = next(g.sms for g in target_gpus() if g.label == "H100 SXM")
    cfg = SchedulerConfig()
    return [f"{sms} SMs", f"clipped at {cfg.clip_max_new_tokens}",
            f"{cfg.max_prefill_tokens:,} prompt tokens per pass",
            f"{get_gpu('h200-141gb').hbm_bandwidth / 1e12:g} TB/s",
            f"{MAX_REGISTERS_PER_THREAD} per thread", f"{EPISODE_GAP_STEPS} decode steps apart",
            f"{CPU_CARD_MIB:,} MiB", f"{GPU_SYSTEM_PROMPT_LEN:,} tokens on a GPU",
            f"{CHAT_POOL:,}-slot", f"{TIGHT_POOL:,}-slot", f"the {SUPPORT_SYSTEM_LEN:,} tokens",
            f"{LONG_ANSWERS.requests} long-form", f"{SHAREGPT_MEAN_PROMPT} and",
            f"decay from {cfg.new_token_ratio_decay_steps} to",
            f"Llama-3-8B has {llama.num_attention_heads} query heads",
            f"has {llama.num_attention_heads // llama.num_key_value_heads} query heads per KV head",
            f"`hidden_size` {load_model('qwen3-4b').hidden_size}"]


@pytest.mark.parametrize("chapter", (*CHAPTERS, *PAGES))
def test_numbers_pagedkv_holds_are_not_typed_in_markdown(chapter: str) -> None:
    text = " ".join(" ".join(c.split()) for c in cells(chapter, "markdown"))
    assert [p for p in typed_phrases() if p in text] == [], chapter


def test_chapter_3_tells_its_page_table_example_from_the_scenario() -> None:
    """Chapter 3's example (which rows and pages the prefill batch took, which page x freed,
    what E holds in the exercise) is printed from pagedkv.lessons.scenarios, not typed: the
    rows and pages follow the batch's order, and prose typed around an earlier order went
    wrong with it."""
    from pagedkv.lessons.scenarios import page_reuse_story, page_table_example

    numbers = set()
    for version in SGLANG_VERSIONS:
        st = page_table_example(version)
        numbers |= {f"row {r}" for r in st.rows.values()} | {f"page {st.first_page(n)}" for n in st.batch}
        story = page_reuse_story(st)
        numbers |= {f"page {p}" for p in story.free_pages} | {str(story.e.tolist())[1:-1]}
    for text in cells("03-paging", "markdown"):
        for para in re.split(r"\n\s*\n", text):
            para = " ".join(para.split())
            if re.search(r"\b(x|E)\b|A and B", para):
                typed = [n for n in numbers if re.search(rf"\b{re.escape(n)}\b", para)]
                assert typed == [], (typed, para[:200])
    code = "\n".join(cells("03-paging", "code"))
    assert "st.first_page(" in code and "st.rows[" in code


def _flat(chapter: str) -> str:
    return " ".join(" ".join(p.split()) for p in paragraphs(chapter))


def test_historical_log_lines_name_their_release() -> None:
    """A fifteenth read found three claims about SGLang's past with no release: each now says
    it is a release before 0.5.9 (the sources do not tell which), and none says 'that release'
    or 'older releases' without one (the QwQ-32B log beside chapter 1's names 0.4.3.post4)."""
    said = {"01-memory-arithmetic": "0.88 was the fixed value at tp 1 of the release that wrote "
                                    "the log, a release before 0.5.9",
            "03-paging": "The SGLang releases of that time (before 0.5.9: those before PR #4913",
            "05-retraction": "SGLang releases before 0.5.9 logged a retraction as"}
    for chapter, words in said.items():
        text = _flat(chapter)
        assert words in text, chapter
        assert not re.search(r"0\.88 was that release's|Older (SGLang )?releases|The release of that time",
                             text), chapter


def test_chapter_6_points_at_the_measurements_where_they_are() -> None:
    """'Measured on GPUs' comes after the page-size section and before the exercises; the
    pointer to it says so (it once said 'at the end of the chapter', with four sections after it)."""
    heads = [line for text in cells("06-kernel", "markdown") for line in text.splitlines()
             if line.startswith("## ")]
    k = heads.index("## Measured on GPUs")
    assert heads[k - 1].startswith("## The page-size question") and heads[k + 1] == "## Exercises"
    text = _flat("06-kernel")
    assert '"Measured on GPUs", the section after the page-size question and before the exercises' in text
    assert "at the end of the chapter, says whether" not in text


def test_chapter_5_computes_both_loads_at_the_visualizers_smallest_pool() -> None:
    """Chapter 5's calm-load retraction count at the visualizer's smallest pool is computed
    there, beside the busy load's that chapter 7 gives, so that neither is read without the other."""
    code = "\n".join(cells("05-retraction", "code"))
    assert 'chapter_run("full", workload="calm", mem_fraction_static=low_fraction)' in code
    assert 'chapter_run("full", mem_fraction_static=low_fraction)' in code
    assert "{low_busy.retractions} for the busy load on that pool" in code
