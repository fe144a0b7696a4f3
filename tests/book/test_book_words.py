"""One word for each thing, and each thing said one way: a KV slot is not a request row, the
request table has one row count per release wherever the book gives it, and no definition
leans on a word that a later chapter introduces."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pagedkv.lessons.glossary import REQUEST_ROWS_RULE, TERMS, term_chapter, terms_of_chapter
from pagedkv.mem_cache.memory_pool import ReqToTokenPool
from pagedkv.releases import RELEASES, SGLANG_VERSIONS, differences

BOOK = Path(__file__).resolve().parents[2] / "book"
NAMES = tuple(sorted(p.stem for p in BOOK.glob("*.ipynb")))


def paragraphs(name: str) -> list[str]:
    """Markdown paragraphs and list items, and whole code cells (their prose is in strings)."""
    out = []
    for c in json.loads((BOOK / f"{name}.ipynb").read_text())["cells"]:
        text = "".join(c["source"])
        out += re.split(r"\n\s*\n|\n- |\n\d\. ", text) if c["cell_type"] == "markdown" else [text]
    return [" ".join(p.split()) for p in out if p.strip()]


def generated() -> list[str]:
    """What the glossary and the cheat sheet print: every definition, every release row."""
    return [t.definition for t in TERMS] + [" | ".join(row) for row in differences()]


def every_text() -> list[tuple[str, str]]:
    return [(n, p) for n in NAMES for p in paragraphs(n)] + [("generated", g) for g in generated()]


def release_sentences(text: str, release: str) -> str:
    """The sentences of ``text`` that name SGLang ``release``."""
    return " ".join(s for s in re.split(r"(?<=\.) ", text) if f"SGLang {release}" in s)


@pytest.mark.parametrize("release", list(RELEASES))
def test_the_request_rows_rule_is_what_the_pool_builds(release: str) -> None:
    pool = ReqToTokenPool.for_release(5, 4, release)
    said = release_sentences(REQUEST_ROWS_RULE, release)
    assert pool.available_size() == 5  # size rows handed out in both releases
    if pool.rows == 6:
        assert "`size + 1` rows" in said and "padding row" in said and "row 0" in said
    else:
        assert pool.rows == 5 and "`size` rows, all handed out" in said
    rows = {what: (old, new) for what, old, new, _ in differences()}["request row 0"]
    column = rows[0] if release == SGLANG_VERSIONS[-1] else rows[1]  # differences(): oldest, newest
    assert ("size + 1 rows" if pool.rows == 6 else "size rows") in column, column


def test_the_request_table_is_one_row_per_request_nowhere_without_its_padding_row() -> None:
    """'One row per request' tells only half: in 0.5.23 the table has one more. A text that
    counts the table's rows says which release pads it."""
    count = re.compile(r"\bone row per (running )?request|\b(has|gets|allocates)\b[^.;]{0,80}\brows\b")
    table = re.compile(r"req_to_token|request table|page table|ReqToTokenPool")
    for name, text in every_text():
        if table.search(text) and count.search(text):
            assert "padding" in text and "0.5.23" in text, (name, text[:200])


def test_a_slot_is_a_kv_slot_and_a_row_is_a_request_row() -> None:
    names = {t.name for t in TERMS}
    assert {"KV slot (slot)", "request row"} <= names
    for name, text in every_text():
        assert not re.search(r"request slots?\b", text, re.IGNORECASE), (name, text[:200])
    # chapter 9's per-request states are state slots (or track slots, the state slots a request
    # holds for the radix tree), every time: "slot" alone is a KV slot
    for text in paragraphs("09-todays-models"):
        assert not re.findall(r"(?<!state )(?<!state-)(?<!track )(?<![\w`-])slots?\b",
                              text), text[:200]


def test_no_definition_uses_a_word_defined_after_it() -> None:
    """Chapter n's list of words (and the glossary) define each term with words of earlier
    chapters, or of earlier entries of the same list: chapter 1's list must not lean on
    `available_size` of a later chapter, nor 'token usage' on a word it lists below."""
    order = [t for chapter in range(1, 10) for t in terms_of_chapter(chapter)]
    assert len(order) == len(TERMS)
    for k, term in enumerate(order):
        later = [u.name for u in order[k + 1:] if re.search(u.pattern, term.definition, re.IGNORECASE)]
        assert later == [], (term.name, later)


def _admitted(release: str, prompts: list[int], chunked: int | None) -> int:
    from pagedkv.lessons.admission import UniformBatch, admission_pass, admission_state
    from pagedkv.managers.config import SchedulerConfig
    from pagedkv.managers.req import Req

    cfg = SchedulerConfig(release=release, max_prefill_tokens=100, chunked_prefill_size=chunked)
    state = admission_state(UniformBatch(0, 1, 1, 1), 10_000, cfg, 0.7)
    adder, _ = admission_pass(state, [Req(i, n, 10, 10) for i, n in enumerate(prompts)])
    return len(adder.can_run_list)


def test_max_prefill_tokens_is_told_alike_on_both_pages() -> None:
    """The cheat sheet's release table and chapter 4 say what pagedkv does (SGLang's
    PrefillAdder.add_one_req and budget_state): the first request of a pass is exempt in both
    releases; after it 0.5.9 refuses a request whose page-rounded prompt would reach or cross
    what is left (``input_tokens >= rem_input_tokens``) whether or not chunked prefill is on,
    0.5.23 only without it."""
    for release in RELEASES:
        assert _admitted(release, [150], chunked=1000) == 1  # the first one is exempt
        assert _admitted(release, [150], chunked=None) == 1
        assert _admitted(release, [60, 60], chunked=None) == 1
        # reaching the budget is refused as crossing it is: 50 >= 100 - 50; 49 < 50 is not
        assert _admitted(release, [50, 50], chunked=None) == 1
        assert _admitted(release, [50, 49], chunked=None) == 2
    assert _admitted("0.5.9", [60, 60], chunked=1000) == 1
    assert _admitted("0.5.9", [50, 50], chunked=1000) == 1
    assert _admitted("0.5.23", [60, 60], chunked=1000) == 2
    rows = {what: (old, new) for what, old, new, _ in differences()}["max_prefill_tokens"]
    assert all("the first request of a pass is exempt" in rule for rule in rows)
    assert "chunked prefill or not" in rows[0] and "only without chunked prefill" in rows[1]
    ch4 = [re.sub(r'"\s*"', "", p) for p in paragraphs("04-admission")  # adjacent literals joined
           if "`max_prefill_tokens`" in p and "exempt" in p]
    assert len(ch4) == 1
    refuses = "refuses a later request whose page-rounded prompt would reach or cross what is left of it"
    for words in ("In both releases the first request of a pass is exempt from `max_prefill_tokens`",
                  f"SGLang 0.5.9 {refuses}, chunked prefill or not",
                  "SGLang 0.5.23 refuses it only without chunked prefill",
                  "admits the request that reaches or crosses it"):
        assert words in ch4[0], words
    assert all(refuses in rule for rule in rows)
    glossary = next(t.definition for t in TERMS if t.name == "`max_prefill_tokens`")
    assert "would reach or cross what is left of it" in glossary
    for name, text in every_text():
        assert "checked always" not in text, (name, text[:200])
        # both releases refuse at >=: a prompt that would only reach the budget is refused too
        assert not re.search(r"(would|that) cross(es)? it\b", text), (name, text[:200])
        # the mixed decode tokens lower both budgets (PrefillBudget.total_offset); they are
        # not where a budget starts
        assert "start from `num_mixed_decode_tokens`" not in text, (name, text[:200])
    assert any("budgets are lowered by `num_mixed_decode_tokens`" in p
               for p in paragraphs("04-admission"))


PAIRS = (("alloc_for_decode", "alloc_paged_token_slots_decode"),
         ("evict_to_free_tokens", "evict_for_alloc"))


@pytest.mark.parametrize("pair", PAIRS)
def test_two_names_of_one_job_appear_together(pair: tuple[str, str]) -> None:
    """SGLang splits the decode allocation (alloc_for_decode and its paged half) and the
    eviction for an allocation (the allocator's evict_to_free_tokens and the tree's
    evict_for_alloc) in two: wherever the book names one, it names the other and says where
    (a file or a release)."""
    seen = 0
    for name, text in every_text():
        if any(f in text for f in pair):
            seen += 1
            assert all(f in text for f in pair), (name, pair, text[:200])
            assert re.search(r"\.py|0\.5\.(9|23)", text), (name, text[:200])
    assert seen >= 2


def test_one_list_of_the_chapters_that_open_on_the_running_case() -> None:
    """Each visualizer view sits in the chapter BOOK_CHAPTER says; the chapters that open on
    the running case are computed (running_case_chapters), never typed, and chapter 1, whose
    visualizer opens on another model and card, is not among them."""
    from pagedkv.workloads.cases import LONG_ANSWERS
    from pagedkv_widgets.catalog import CATALOG
    from pagedkv_widgets.chapters import CHAPTERS, resolve_settings
    from pagedkv_widgets.facts import BOOK_CHAPTER, chapter_list, running_case_chapters

    calls = {m: int(n[:2]) for n in NAMES if n[:2].isdigit()
             for m in re.findall(r'visualizer\((?:chapter=)?"(\w+)"', "\n".join(paragraphs(n)))}
    assert calls == BOOK_CHAPTER and set(BOOK_CHAPTER) == set(CHAPTERS)
    opens = running_case_chapters()
    memory = resolve_settings(CATALOG, "memory")
    assert BOOK_CHAPTER["memory"] not in opens and memory.model != LONG_ANSWERS.model
    assert chapter_list(opens) == "chapters " + ", ".join(map(str, opens[:-1])) + f" and {opens[-1]}"
    typed = re.compile(r"chapters \d+(, \d+)* and \d+[^.]{0,40}(open|come back)", re.IGNORECASE)
    for name, text in every_text():
        assert not typed.search(text), (name, text[:200])
    for n in ("01-memory-arithmetic", "03-paging", "05-retraction"):
        assert "chapter_list(running_case_chapters())" in "\n".join(paragraphs(n)), n


def _typed_numbers(cell_source: str) -> list[str]:
    """Numbers of two or more digits in the string literals of a code cell, outside the
    ``{...}`` fields of its f-strings, and in a markdown cell's text."""
    text = re.sub(r"\{[^{}]*\}", "", cell_source)
    literals = re.findall(r'"(?:[^"\\\n]|\\.)*"', text)
    return [n for lit in literals for n in re.findall(r"\d[\d,]+", lit)]


def test_chapter_4_computes_the_workloads_it_describes() -> None:
    """The support bot's set-up and its newcomer's sum, and the two uniform runs (how many
    requests, how fast, how long, on what pool), come from SUPPORT_SNAPSHOT, LONG_UNIFORM,
    SHORT_UNIFORM and the scheduler's config, never typed."""
    from pagedkv.lessons.cached_admission import SUPPORT_SNAPSHOT
    from pagedkv.lessons.examples import LONG_UNIFORM, exact_budgets
    from pagedkv.lessons.prefix_examples import SUPPORT_CHATS, SUPPORT_MAX_NEW, SUPPORT_SYSTEM_LEN

    assert (SUPPORT_SNAPSHOT.chats, SUPPORT_SNAPSHOT.system_len, SUPPORT_SNAPSHOT.max_new_tokens) == (
        SUPPORT_CHATS, SUPPORT_SYSTEM_LEN, SUPPORT_MAX_NEW)
    specs = LONG_UNIFORM.specs()
    assert len(specs) == LONG_UNIFORM.requests and specs == exact_budgets(specs)
    assert {s.output_len for s in specs} <= set(range(LONG_UNIFORM.output[0], LONG_UNIFORM.output[1] + 1))
    cells = json.loads((BOOK / "04-admission.ipynb").read_text())["cells"]
    runs = re.compile(r"support bot|SUPPORT_SNAPSHOT|support_bot_snapshot|LONG_UNIFORM|SHORT_UNIFORM|"
                      r"requests arrive|per second|-token pool|-slot pool")
    described = [c for c in cells if runs.search("".join(c["source"]))]
    assert len(described) >= 5
    for c in described:
        src = "".join(c["source"])
        if c["cell_type"] == "markdown":
            for para in re.split(r"\n\s*\n", src):
                if runs.search(para):
                    assert not re.search(r"\d", para), para[:200]
        elif "import (" not in src:
            assert _typed_numbers(src) == [], src[:200]


@pytest.mark.parametrize("release", list(RELEASES))
def test_chapter_4_on_your_gpu_says_what_a_newcomer_must_fit(release: str) -> None:
    """The 'On your GPU' run of chapter 4 says what PrefillAdder tests a newcomer against,
    0.5.23's extra page included (its text once left the page out)."""
    import inspect

    from pagedkv.lessons import on_gpu_serving
    from pagedkv.lessons.admission import UniformBatch, admission_state
    from pagedkv.managers.config import SchedulerConfig
    from pagedkv.managers.req import Req

    cfg = SchedulerConfig(release=release)
    words = on_gpu_serving.newcomer_test_words(cfg, 16, 256)
    extra = RELEASES[release].extra_page_per_request
    assert ("the extra page (16 tokens) SGLang 0.5.23 charges" in words) == extra
    assert "all 256 tokens it may write" in words
    adder = admission_state(UniformBatch(0, 1, 1, 1), 4096, cfg, 0.7, 16).adder()
    assert adder.newcomer_need(Req(0, 10, 256, 256), 10) == 10 + 256 + 16 * extra
    assert "newcomer_test_words(cfg, eng.page_size, max_new)" in inspect.getsource(on_gpu_serving.admission)


@pytest.mark.parametrize("name", NAMES)
def test_counts_in_code_text_are_computed(name: str) -> None:
    """A count of requests, tokens or slots in the text a code cell prints comes from a value
    (a format field), never a literal beside it: '2 requests/s' once stood for the running
    case's busy rate, 'x 3' for the requests that stay, '23 tokens' for a sum of lengths."""
    count = re.compile(r"\b\d[\d.,]*\s?(requests?/s|requests|tokens|slots|chats)\b")
    for c in json.loads((BOOK / f"{name}.ipynb").read_text())["cells"]:
        if c["cell_type"] == "code":
            text = re.sub(r"\{[^{}]*\}", "", "".join(c["source"]))
            literals = re.findall(r'"(?:[^"\\\n]|\\.)*"', text)
            assert [lit for lit in literals if count.search(lit)] == [], name
            assert not re.search(r"\{\"\d[\d.]* requests/s\"", "".join(c["source"])), name


def test_the_typed_list_of_on_your_gpu_chapters_is_the_chapters_that_have_one() -> None:
    """intro.md and README.md are plain Markdown, so their list of the chapters that end with
    "On your GPU" is typed: it must be the chapters that have the section."""
    from pagedkv_widgets.facts import chapter_list

    have = tuple(int(n[:2]) for n in NAMES if n[:2].isdigit()
                 and any(p.startswith("## On your GPU") for p in paragraphs(n)))
    words = chapter_list(have)
    root = BOOK.parent
    intro = " ".join((BOOK / "intro.md").read_text().split())
    readme = " ".join((root / "README.md").read_text().split())
    assert f"{words} end with a section (\"On your GPU\")" in intro
    assert f"{words.capitalize()} end with an \"On your GPU\" section" in readme


def test_chapter_4_prints_sglangs_clip_and_types_the_ratios_constants() -> None:
    """Chapter 4's formulas print the clip (every min(..., C)) from pagedkv's
    ``SchedulerConfig``, never typed; its prose types the ratio's start, floor factor, floor
    and decay steps (the cheat sheet computes them), which are pagedkv's defaults."""
    from pagedkv.managers.config import SchedulerConfig

    cfg = SchedulerConfig()
    text = " ".join(paragraphs("04-admission"))
    clip_arg = r"min\((?:[^()]|\([^()]*\))*?,\\?\s*\\?\s*({})\s*\)"
    assert re.findall(clip_arg.format(r"\d[\d,]*"), text) == []  # no clip typed
    printed = re.findall(clip_arg.format(r"CLIP|\{[\w.]*clip[\w.]*\}"), text)
    assert len(printed) >= 6, printed
    # a formula's CLIP placeholder is replaced by the constant (chapter 4 sets clip from it)
    assert "clip = SchedulerConfig().clip_max_new_tokens" in text
    formulas = [c for c in cells_of("04-admission", "code") if "CLIP)" in c]
    assert len(formulas) >= 3 and all(
        re.search(r'\.replace\(["\']CLIP["\'], str\((clip|SchedulerConfig\(\)\.clip_max_new_tokens)\)\)', c)
        for c in formulas)
    decay = re.search(r"starts at ([\d.]+), sinks to ([\d.]+) in (\d+) decode steps", text)
    start, floor, steps = decay.groups()
    assert (float(start), float(floor), int(steps)) == (
        cfg.init_ratio, round(cfg.min_ratio, 3), cfg.new_token_ratio_decay_steps)
    assert f"${cfg.init_new_token_ratio:g} \\times$ `schedule_conservativeness`" in text
    assert f"(\\text{{init}} - \\text{{min}}) / {cfg.new_token_ratio_decay_steps}$" in text
    assert f"{cfg.min_new_token_ratio_factor:g} \\times \\text{{init}}" in text
    assert f"after exactly {cfg.new_token_ratio_decay_steps} decode steps" in text


def cells_of(name: str, kind: str) -> list[str]:
    """The sources of chapter ``name``'s cells of type ``kind``."""
    return ["".join(c["source"]) for c in json.loads((BOOK / f"{name}.ipynb").read_text())["cells"]
            if c["cell_type"] == kind]


GLOSSARY_MUST_HAVE = ("HBM", "$B_{\\max}$ (batch cap)", "MHA, GQA, MQA", "MLA", "hybrid model",
                      "`max_new_tokens`", "mini-sglang", "`max_prefill_tokens`",
                      "`rem_total_tokens`", "`schedule_conservativeness`",
                      "overlap loop, normal loop", "ignore-EOS request", "FCFS", "ShareGPT",
                      "attention sinks", "prefill/decode disaggregation", "split-KV",
                      "compute capability (`sm_XY`)", "`lock_ref`", "LRU",
                      # a second first read found these used before (or without) a definition
                      "attention backend", "Triton", "speculative decoding",
                      "data-parallel attention (dp-attention)", "DeepEP", "`#token`",
                      "FlashInfer, FA3, FA4, TRT-LLM, FlashMLA", "SM (streaming multiprocessor)",
                      "roofline model", "`ChunkCache`", "LoRA adapter", "HiCache",
                      # a third first read found these used before (or without) a definition
                      "GB, GiB", "internal fragmentation", "external fragmentation",
                      "$\\lceil x \\rceil_\\text{page}$ (`ceil_page`)", "CLIP (`CLIP_MAX_NEW_TOKENS`)",
                      "head-of-line blocking", "mixed chunked prefill", "ModelRunner", "`ptxas`",
                      "Mamba, Mamba state", "cache salt", "Gated DeltaNet",
                      # a fourth first read found these used before (or without) a definition
                      "tensor parallelism (tp), pipeline parallelism (pp)", "DSA (NSA)",
                      "tensor cores", "warp", "`kv_last_page_len`",
                      # a fifth first read found these used without a definition
                      "vLLM", "ROCm", "FasterTransformer",
                      # an eleventh read found this used without a definition
                      "routing key",
                      # a twelfth read found this printed before its definition
                      "FMA (fused multiply-add)",
                      # a fifteenth read looked these up in the glossary and found nothing
                      "first fit", "Orca (Max, Pow2, Oracle)", "held ahead",
                      "retraction episode (episode)", "HMMA", "protected (`protected_size`)",
                      "sliding-window attention (SWA)", "linear attention")


def test_the_glossary_defines_every_word_the_book_leans_on() -> None:
    """The glossary page says it defines every term: these were once missing from it. Each is
    used in the chapter it names (the first one whose text matches it)."""
    by_name = {t.name: t for t in TERMS}
    assert [n for n in GLOSSARY_MUST_HAVE if n not in by_name] == []
    chapters = sorted(n for n in NAMES if n[:2].isdigit())
    for name in GLOSSARY_MUST_HAVE:
        t = by_name[name]
        if t.chapter == 1:
            continue  # chapter 1's words may first appear in its generated list
        first = next(int(c[:2]) for c in chapters
                     if any(re.search(t.pattern, p, re.IGNORECASE) for p in paragraphs(c)))
        assert first == t.chapter, (name, first)
    assert "--disable-overlap-schedule" in by_name["overlap loop, normal loop"].definition
    assert "GPU's compute units" in by_name["SM (streaming multiprocessor)"].definition


def _first_paragraph(term_name: str) -> tuple[str, str]:
    """The chapter that introduces the term, and the first paragraph of it that uses the term."""
    t = next(t for t in TERMS if t.name == term_name)
    chapter = next(n for n in NAMES if n[:2] == f"{t.chapter:02d}")
    return chapter, next(p for p in paragraphs(chapter) if re.search(t.pattern, p, re.IGNORECASE))


@pytest.mark.parametrize("term_name", [t.name for t in TERMS if t.first_use])
def test_a_word_the_prose_defines_is_defined_where_its_chapter_first_uses_it(term_name: str) -> None:
    """A word that no chapter list shows is glossed in one clause at its first use: the first
    paragraph of its chapter that matches it holds the gloss's words (the term-order test
    above keeps every earlier chapter free of it)."""
    t = next(t for t in TERMS if t.name == term_name)
    assert not t.listed
    chapter, para = _first_paragraph(term_name)
    assert t.first_use.lower() in para.lower(), (term_name, chapter, para[:300])


def test_every_word_glossed_at_first_use_is_checked_there() -> None:
    """The words the second first read found undefined all carry a gloss to check."""
    unchecked = [n for n in GLOSSARY_MUST_HAVE[GLOSSARY_MUST_HAVE.index("attention backend"):]
                 if not next(t for t in TERMS if t.name == n).first_use]
    assert unchecked == []


def test_the_cheat_sheets_token_usage_row_points_at_the_chapter_that_introduces_it() -> None:
    from pagedkv_widgets.reference import formulas_md

    row = next(line for line in formulas_md().data.splitlines() if line.startswith("| token usage"))
    assert row.rstrip(" |").endswith(f"| {term_chapter('token usage')}") and term_chapter("token usage") == 1


def test_prepare_for_decode_says_what_each_release_evicts() -> None:
    """SGLang 0.5.23 evicts only the shortfall (evict_to_free_tokens); 0.5.9's
    evict_from_tree_cache asks the tree for the whole amount: the definition says both."""
    text = next(t.definition for t in TERMS if t.name == "`prepare_for_decode`")
    for name, release in RELEASES.items():
        said = release_sentences(text.replace(", SGLang", ". SGLang"), name)
        words = ("evicts only what the free list lacks" if release.evict_until_free
                 else "evicts the whole amount")
        assert words in said, (name, said)


def test_the_cheat_sheet_keys_its_short_names_before_the_first_table() -> None:
    """The cheat sheet comes before chapter 1: every short name its tables use is told in its
    key above the first table, and the glossary defines the words among them."""
    from pagedkv_widgets.reference import constants_md, formulas_md, releases_md

    cells = json.loads((BOOK / "cheat-sheet.ipynb").read_text())["cells"]
    first_table = next(k for k, c in enumerate(cells) if "formulas_md()" in "".join(c["source"]))
    key = " ".join("".join(c["source"]) for c in cells[:first_table] if c["cell_type"] == "markdown")
    tables = " ".join(m().data for m in (formulas_md, constants_md, releases_md))
    for short, told in ((r"\rceil_\text", r"\rceil_\text{page}$ (`ceil_page`) is"),
                        ("CLIP", "CLIP is"), ("conservativeness", "conservativeness is"),
                        ("FCFS", "FCFS is"), ("LRU", "LRU is"), ("MLA", "MLA is"),
                        ("HBM", "HBM is"), ("sm_1", "`sm_XY` is"),
                        # a fifteenth read found the formulas' symbols defined only in chapter 1
                        (r"L \cdot", "$L$ is"), ("H_{kv}", "$H_{kv}$ its"),
                        ("d_{head}", "$d_{head}$\nthe numbers"), (r"\text{bytes}", r"$\text{bytes}$ is"),
                        ("kv_lora_rank", "`kv_lora_rank` numbers"),
                        ("qk_rope_head_dim", "`qk_rope_head_dim`\nnumbers"),
                        (r"\text{cell}", r"$\text{cell}$ is"), (r"\text{pre}", r"$\text{pre}$ and"),
                        (r"\text{post}", r"$\text{post}$ are"), (r"\text{rest}", r"$\text{rest}$ is"),
                        ("at context $c$", "$c$ is a context length")):
        if short in tables:
            assert " ".join(told.split()) in " ".join(key.split()), short
    names = " ".join(t.name for t in TERMS)
    assert all(w in names for w in ("FCFS", "LRU", "MLA", "HBM", "schedule_conservativeness",
                                    "ceil_page", "CLIP", "sm_XY"))


def test_the_cheat_sheets_cell_size_formula_gives_each_releases_fp8_dsa_cell() -> None:
    """The MLA formula at 1 byte is what SGLang 0.5.9 sizes an fp8_e4m3 DeepSeek V3.2 cell
    with; 0.5.23 sizes the latent as its pool stores it. A fifteenth read found the formula
    row giving 0.5.9's value under the page's default release: the row now prints each
    release's value from the start the release table runs, and the formula it states for
    the stored latent gives 0.5.23's."""
    from pagedkv.configs.dsa_config import indexer_bytes_per_token
    from pagedkv.configs.model_presets import load_model
    from pagedkv.lessons.version_runs_startup import dsa_fp8_cell, dsa_fp8_plan
    from pagedkv_widgets.reference import formulas_md

    v32 = load_model("deepseek-v3.2")
    layers, key = v32.num_hidden_layers, indexer_bytes_per_token(v32.index_head_dim)
    stored = v32.kv_lora_rank + 4 * (v32.kv_lora_rank // 128) + 2 * v32.qk_rope_head_dim
    raw = v32.kv_lora_rank + v32.qk_rope_head_dim
    row = next(line for line in formulas_md().data.splitlines()
               if line.startswith("| bytes per token (cell size)"))
    assert (r"$\text{kv_lora_rank} + 4 \lfloor \text{kv_lora_rank} / 128 \rfloor + 2 \cdot "
            r"\text{qk_rope_head_dim}$") in row
    rows = {what: (old, new) for what, old, new, _ in differences()}
    dsa = rows["DeepSeek V3.2 (DSA) fp8_e4m3 bytes per token"]
    for name, release in RELEASES.items():
        cell = dsa_fp8_plan(release).cell_size
        assert cell == layers * ((stored if release.dsa_fp8_latent_profiled_as_stored else raw) + key)
        assert f"{cell:,} B in SGLang {name}" in row, name
        assert dsa_fp8_cell(release).startswith(f"{cell:,} B per token")
    assert dsa[1].startswith("what the pool stores")  # differences(): oldest, then newest
    assert dsa_fp8_plan(RELEASES["0.5.23"]).cell_size == 61 * 788 == 48_068  # SGLang's value
    assert dsa_fp8_plan(RELEASES["0.5.9"]).cell_size == 61 * 708 == 43_188


def test_chapter_6_says_which_gpus_put_the_dots_on_tensor_cores() -> None:
    """Triton 3.9 gives the T4 (sm_75) no tensor-core dots: a fifteenth read found the summary
    and the prediction's prose saying every GPU used them. The prose names the GPUs from the
    compiled table, and the summary says what the T4 gets."""
    text = " ".join(paragraphs("06-kernel"))
    assert "every GPU is predicted" not in text
    assert "both matrix products on the tensor cores in the cache's dtype." not in text
    assert 'stage1_row(rows, g.arch, dot_dtype[g.label])["loop_ops"]["HMMA"]' in text
    assert "as fp32 FMAs on the T4 (sm_75)" in text


def test_words_only_the_generated_tables_use_are_glossed_in_them() -> None:
    """The rope scaling factor and DSA first reach a reader in chapter 5's table of release
    changes (and the cheat sheet's): the row glosses them, and the glossary has them."""
    from pagedkv.lessons.versions import version_changes

    rows = {r.change: r for r in version_changes()}
    rope = next(c for c in rows if "rope scaling factor" in c)
    assert "`rope_scaling`'s `factor`" in rope and term_chapter("rope scaling factor") == 5
    dsa = next(c for c in rows if "DSA" in c and "renamed" in c)
    assert "calls NSA" in dsa and "indexer" in dsa
    assert term_chapter("DSA (NSA)") == 1
    # the eleventh read: the track slots of chapter 5's row, and their strategy's values, were
    # defined nowhere; the row glosses them and chapter 9's list and the glossary name the flag
    track = next(c for c in rows if "track slots" in c)
    assert "ping-pong" not in track and "copies of its state" in track and "chapter 9" in track
    by_name = {t.name: t for t in TERMS}
    slot = by_name["track slot"]
    assert slot.chapter == 9 and slot.listed
    for words in ("--mamba-radix-cache-strategy", "--mamba-scheduler-strategy", "`no_buffer`",
                  "`extra_buffer`", "`auto`", "take turns"):
        assert words in slot.definition, words
    assert "MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO" in by_name["state slot"].definition


def test_eagle_is_glossed_where_the_page_size_rules_name_it() -> None:
    """fa4's page-size rule (chapter 3's table, the cheat sheet) names EAGLE's topk flag: the
    rule says what EAGLE and its draft tree are, and the glossary has EAGLE."""
    from pagedkv.lessons.attention_backends import forced_page_size_when
    from pagedkv.releases import SGLANG_VERSIONS

    for release in SGLANG_VERSIONS:
        when = forced_page_size_when("fa4", release)
        if "eagle" in when.lower():
            assert "speculative-decoding method whose draft proposes a tree" in when, release
    assert any("EAGLE" in forced_page_size_when("fa4", r) for r in SGLANG_VERSIONS)
    assert term_chapter("EAGLE") == 3


def test_fma_is_spelled_out_before_the_compiled_counts_print_it() -> None:
    """Chapter 6 prints "fp32 FMA instructions" (``compiled_highlights``) right after the list
    of what the compiled kernels are read for: that list spells FMA out, before the cell
    that prints it (a twelfth read met it a screen before its definition)."""
    cells = json.loads((BOOK / "06-kernel.ipynb").read_text())["cells"]
    src = ["".join(c["source"]) for c in cells]
    printed = next(k for k, c in enumerate(cells)
                   if c["cell_type"] == "code" and "print(compiled_highlights(" in src[k])
    glossed = next(k for k, s in enumerate(src) if re.search(r"\bFMAs?\b|fused multiply-add", s))
    assert glossed < printed and "FMAs (fused multiply-adds" in src[glossed]


def test_the_checkpoint_grid_is_defined_where_the_book_uses_it() -> None:
    """"Checkpoint grid" appears only in the track slot's definition, which says what it is:
    SGLang 0.5.23's ``mamba_checkpoint_grid``, the state chunk or the page size, the longer
    (a twelfth read found it undefined)."""
    from pagedkv.mem_cache.mamba_radix_cache import MAMBA_CHUNK_SIZE

    uses = [(n, p[:80]) for n, p in every_text() if "checkpoint grid" in p.lower()]
    slot = next(t for t in TERMS if t.name == "track slot").definition
    assert uses == [("generated", slot[:80])]
    assert "*checkpoint grid*, SGLang 0.5.23's `mamba_checkpoint_grid`" in slot
    assert f"`mamba_chunk_size` or {MAMBA_CHUNK_SIZE} tokens where it sets none" in slot
    assert "page size where pages are longer" in slot


def test_chapter_4_compares_the_cached_newcomer_with_a_server_that_has_no_cache() -> None:
    """The support bot's newcomer is set against a real uncached server (a twelfth read: the
    comparison once kept the free slots and dropped the evictable ones): the finished chats'
    tokens free, each running chat with its own copy of the system prompt."""
    from pagedkv.errors import ConfigError
    from pagedkv.lessons.cached_admission import (
        SUPPORT_SNAPSHOT,
        CachedAdmission,
        free_without_radix_cache,
        support_bot_snapshot,
    )
    from pagedkv.managers.schedule_policy import AddReqResult

    snap = CachedAdmission(1000, 150, 663, 7122, 5629, 0, 448.0, 12303.0, AddReqResult.CONTINUE)
    assert free_without_radix_cache(snap, 12, 1000) == 7122 + 5629 - 11 * 1000
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ConfigError, match="running"):
            free_without_radix_cache(snap, bad, 1000)
    with pytest.raises(ConfigError, match="shared_len"):
        free_without_radix_cache(snap, 12, 0)
    live_snap, live = support_bot_snapshot()
    reqs = live.running.reqs
    rows = live.req_to_token_pool.req_to_token
    first = [list(rows[r.req_pool_idx, :SUPPORT_SNAPSHOT.system_len]) for r in reqs]
    assert all(f == first[0] for f in first)  # one shared copy of the system prompt
    assert free_without_radix_cache(live_snap, len(reqs), SUPPORT_SNAPSHOT.system_len) == (
        live_snap.available + live_snap.evictable - (len(reqs) - 1) * SUPPORT_SNAPSHOT.system_len)
    cells = json.loads((BOOK / "04-admission.ipynb").read_text())["cells"]
    text = next(s for s in ("".join(c["source"]) for c in cells) if "support_bot_snapshot()" in s)
    assert "with nothing evictable" not in text and "--disable-radix-cache" in text
    assert "free_without_radix_cache(snap, running, bot.system_len)" in text


def test_the_step_tables_columns_say_what_a_prefill_row_counts() -> None:
    """Chapter 4's GPU step table: a prefill row's "running" leaves out the requests it admits
    (as SGLang's #running-req) while "tokens used" counts their tokens; the text says both."""
    text = " ".join(paragraphs("04-admission"))
    assert "in a prefill row *running* counts the requests that ran before it" in text
    assert "those the step admits included (*tokens used*)" in text


def test_lengths_are_named_for_what_they_measure() -> None:
    """Chapter 2's "longest" is a request's prompt + output, beside lengths clipped per part;
    chapter 5 gives the prompts' spread as a sigma, like the answers' (a twelfth read)."""
    ch2 = " ".join(paragraphs("02-fragmentation"))
    assert "longest request (prompt + output)" in ch2
    ch5 = " ".join(paragraphs("05-retraction"))
    assert "% spread" not in ch5 and "($\\\\sigma = {c.prompt_sigma}$" in ch5
