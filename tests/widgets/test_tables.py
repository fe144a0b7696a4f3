"""pagedkv_widgets.tables and .run_figures: the book's table and figure builders."""

from __future__ import annotations

import re
from types import SimpleNamespace

from pagedkv.lessons.admission import UniformBatch, admission_state
from pagedkv.lessons.analysis import RetractionAccounting, first_retraction, retraction_episodes
from pagedkv.lessons.examples import CaseColumn, CaseStudy, tiny_retraction_run
from pagedkv.lessons.fragmentation import MemoryShare
from pagedkv.managers import SchedulerConfig
from pagedkv.managers.trace import Event, StepRow, Trace, TraceMeta
from pagedkv_widgets.run_figures import policy_bars_figure, ratio_decay_figure, run_timeline_figure
from pagedkv_widgets.tables import (
    admission_state_md,
    batch_table,
    case_study_table,
    episodes_table,
    first_retraction_md,
    markdown_table,
    shares_table,
)


def test_markdown_table() -> None:
    assert markdown_table(("a", "b"), [(1, "x"), (2, "")]).data == (
        "| a | b |\n|---|---|\n| 1 | x |\n| 2 |  |")


def test_shares_table() -> None:
    share = MemoryShare("page=16", 0.9, 0.05, 0.03, 0.0, 0.02, steps=10)
    # "reserved" is admission's word (chapter 1: no slot held); the share of slots held for
    # tokens still to come is "held ahead"
    assert shares_table([share]).data.splitlines()[0] == (
        "| scheme | tokens | held ahead | internal | external | free |")
    assert shares_table([share]).data.splitlines()[2] == (
        "| page=16 | 90.0% | 5.0% | 3.0% | 0.0% | 2.0% |")


def test_admission_state_md() -> None:
    b = UniformBatch(120, 600, 2048, 400)
    text = admission_state_md(b, admission_state(b, 200_000, SchedulerConfig(), 0.7), 0.7,
                              4096).data
    assert "120 x 999 = **119,880** (60%)" in text
    assert "**1,153.6** tokens; all 120: **138,432**" in text
    assert "= **-58,312**" in text


def test_tiny_run_tables() -> None:
    first = first_retraction(tiny_retraction_run())
    row = batch_table(first.rows).data.splitlines()[2].split(" | ")
    assert row[:4] == ["| 2", "39", "54", "92"] and row[-1] == " |"  # no new page needed
    text = first_retraction_md(first).data
    assert "request **2**, with 54 outputs" in text and "92 KV tokens in 6 pages" in text
    assert "keeps the 32 tokens of its prompt it already held (2 pages), so **64** slots" in text
    assert "(108 + 20 x 2) / (140 + 1)) = **1.0000**" in text
    plain = first_retraction_md(first_retraction(tiny_retraction_run(radix_cache=False))).data
    assert "and **96** slots come back" in plain


def test_episodes_and_case_study_tables() -> None:
    tr = Trace(TraceMeta(max_total_num_tokens=10))
    for i in range(1000):
        tr.record_step(StepRow(step=i, time_s=0.0, kind="decode", tokens_used=0,
                               tokens_reserved=0.0, tokens_free=0, pages_used=0, num_running=1,
                               num_waiting=0, new_token_ratio=0.098, tokens_evictable=0,
                               tokens_protected=0))
    for step in (10, 620, 900):
        tr.record_event(Event(step, "retract", 0, {"output_len": 1, "freed": 1}))
    row = episodes_table({"run": retraction_episodes(tr, 0.098)}, 0.098).data.splitlines()[2]
    assert row == "| run | 3 | 3 | 445 | 1 of 2 |"  # gaps 610 and 280
    acc = RetractionAccounting(victims=4, held=1040.0, kept=390.4, gained=933.2)
    col = CaseColumn(1.0, ["0.35", "0.40"], {"0.0980"}, acc, [19, 12], 0)
    study = CaseStudy([col], SimpleNamespace(), SimpleNamespace())
    lines = case_study_table(study, 2.0, 0.35).data.splitlines()
    assert lines[0] == "|  | 100% of peak |"
    assert lines[2] == ("| at 2 req/s: `new_token_ratio` after the first retraction (seeds 0 / 1 / 2) "
                        "| 0.35 / 0.40 |")
    assert lines[3].endswith("| 650 own + 283 evicted = 933 |")
    assert lines[5] == "| at 0.35 req/s: retractions (seed 0) | 0 |"
    assert acc.own == 1040.0 - 390.4 and acc.evicted == 933.2 - acc.own
    assert study.start_ratios == ["0.0980"]


def test_run_figures() -> None:
    fig = ratio_decay_figure((0.5, 1.0), steps=10)
    assert len(fig.data) == 2 and fig.data[1].y[0] == 0.7
    tr = Trace(TraceMeta(max_total_num_tokens=10))
    for i in range(4):
        tr.record_step(StepRow(step=i, time_s=0.1 * i, kind="decode", tokens_used=i,
                               tokens_reserved=1.0, tokens_free=10 - i, pages_used=i,
                               num_running=1, num_waiting=0, new_token_ratio=0.5,
                               tokens_evictable=0, tokens_protected=0))
    tr.record_event(Event(2, "retract", 0, {"output_len": 1, "freed": 1}))
    run = SimpleNamespace(trace=tr)
    fig = run_timeline_figure({"a": run, "b": run}, 10, visible="b")
    assert len(fig.data) == 9 and [t.visible for t in fig.data[:8]] == [False] * 4 + [True] * 4
    assert list(fig.data[3].x) == [0.2]  # the retraction marker
    # The pool line is named in the legend (shown for every run), not written over the
    # curves and retraction marks just under it.
    assert not fig.layout.annotations and fig.data[8].name == "pool: 10 tokens"
    for button in fig.layout.updatemenus[0].buttons:
        assert len(button.args[0]["visible"]) == 9 and button.args[0]["visible"][-1]
    assert len(run_timeline_figure({"a": run}, 10, show_reserved=False).data) == 4
    m = SimpleNamespace(output_tokens_per_s=1.0, num_retractions=2, recomputed_tokens=3,
                        mean_queue_s=4.0)
    fig = policy_bars_figure({("w", "sglang"): m, ("w", "no_reserve"): m, ("v", "sglang"): m,
                              ("v", "no_reserve"): m})
    assert len(fig.data) == 8 and list(fig.data[1].y) == [2, 2]


def test_strip_and_lookup_text() -> None:
    from pagedkv.lessons.scenarios import contiguous_story, page_table_example, page_table_lookups
    from pagedkv_widgets.tables import lookups_text, strip_text

    _, frames = contiguous_story()
    last = strip_text(frames[-1:], width=4).splitlines()
    assert last == ["y finishes  A  A  A  A  .  .  B  B  B  B  .  .  C  C  C  C"]
    text = lookups_text(page_table_lookups(page_table_example("0.5.9"), positions=1))
    assert text.splitlines()[0] == (
        "page_table[2, 0] = 12 -> request B token 'A' has its K/V at physical slot 12")


def test_page_cost_and_admission_tables() -> None:
    from pagedkv.lessons.admission import (
        SweepRow,
        UniformBatch,
        admission_pass,
        admission_state,
        same_requests,
    )
    from pagedkv.lessons.fragmentation import page_size_costs
    from pagedkv.managers import AddReqResult
    from pagedkv.workloads.synthetic import fixed
    from pagedkv_widgets.tables import admissions_table, page_cost_table, ratio_sweep_table

    (four,) = page_size_costs(fixed(1, 5, 1), (4,))  # 6 tokens in 2 pages of 4
    assert page_cost_table([four]).data.splitlines()[2] == "| 4 | 6 | 8 | 25.0 % | 2 |"
    state = admission_state(UniformBatch(0, 1, 1, 1), 10_000, SchedulerConfig(), 0.5)
    adder, _ = admission_pass(state, same_requests(1, 3000, 2000))
    assert admissions_table(adder).data.splitlines()[2] == "| 0 | 3,000 | 5,001 |  |"
    busy = admission_state(UniformBatch(2, 10, 30, 1), 100, SchedulerConfig(), 0.5)
    row = SweepRow(0.5, busy, 2, AddReqResult.NO_TOKEN)  # 2 x 10 held, 2 x 29 x 0.5 reserved
    assert ratio_sweep_table([row]).data.splitlines()[2] == "| 0.500 | 80 | 29 | 51 | 2 | NO_TOKEN |"


def test_run_metric_tables() -> None:
    from pagedkv_widgets.tables import conservativeness_table, policy_table

    m = SimpleNamespace(output_tokens_per_s=1234.4, num_retractions=3, recomputed_tokens=4567,
                        mean_queue_s=1.25, mean_latency_s=2.0, mean_usage=0.5)
    run = SimpleNamespace(metrics=m, config=SchedulerConfig())
    assert conservativeness_table({1.0: run}).data.splitlines()[2] == (
        "| 1.0 | 0.70 -> 0.098 | 1,234 | 3 | 4,567 | 1.2 | 50% |")
    assert policy_table({("w", "sglang"): m}).data.splitlines()[2] == (
        "| w | `sglang` | 1,234 | 3 | 4,567 | 1.2 | 2.0 | 50% |")


def test_tradeoff_figure_axes_agree_and_ticks_are_round() -> None:
    from pagedkv_widgets.axes import nice_log_ticks
    from pagedkv_widgets.share_charts import tradeoff_figure

    assert nice_log_ticks(800, 44_100) == [500, 1000, 2000, 5000, 10000, 20000, 50000]
    fig = tradeoff_figure([1, 4, 16], [0.0, 3.0, 12.0], [44_100, 11_200, 2_900], "t")
    assert "page-table entries" in fig.data[1].name
    assert "page-table entries" in fig.layout.yaxis2.title.text
    assert fig.layout.yaxis2.type == "log"
    assert list(fig.layout.yaxis2.ticktext) == ["2,000", "5,000", "10,000", "20,000", "50,000"]


def test_page_table_shows_free_rows_as_stored() -> None:
    from pagedkv.lessons.scenarios import page_table_example
    from pagedkv_widgets.memory_maps import page_table_html, page_table_rows

    st = page_table_example("0.5.9")
    table = st.pool.req_to_token.tolist()
    assert table[1][:4] == [8, 9, 10, 11] and st.pool.free_slots == [3, 1]
    free = {1: "x finished", 3: "never used"}
    header, rows = page_table_rows(table, st.lens, st.labels, free)
    assert header[0] == "request row" and header[1:4] == ["0", "1", "2"] and header[-1] == "holds"
    cells = [values for values, _ in rows]
    assert cells[1][1:6] == ["8", "9", "10", "11", "0"] and cells[1][-1] == "x finished"
    assert cells[3][1:9] == ["0"] * 8 and cells[3][-1] == "never used"
    assert cells[2][5] == ".."  # a live row shows only the positions it has reached
    assert [free_row for _, free_row in rows] == [i in free for i in range(len(table))]
    # The HTML: a captioned table, one <tr> per row (free ones marked), each row named by a
    # row header, every cell escaped.
    page = page_table_html(table, st.lens, st.labels, free, caption='a <b> "caption"').data
    assert page.count("<tr") == len(table) + 1 and page.count('<tr class="pkv-free-row">') == 2
    assert page.count('<th scope="row">') == len(table)
    title = re.search(r'<p class="pkv-table-title" id="([\w-]+)">page table req_to_token', page)
    assert title and f'<table class="pkv-table" aria-labelledby="{title.group(1)}">' in page
    assert "<figcaption>a &lt;b&gt; &quot;caption&quot;</figcaption>" in page


def test_attention_backend_tables() -> None:
    from pagedkv_widgets.tables import attention_backends_table, forced_page_sizes_table

    rows = attention_backends_table().data.splitlines()
    assert rows[2] == ("| Hopper (sm_90) | H100, H200, H20 | `fa3` | 1 | one page id per page (at "
                       "page size 1, one per token) |")
    assert rows[3].startswith("| Blackwell data centre (sm_100) |") and "| `trtllm_mha` | 64 |" in rows[3]
    assert "| Ada (sm_89) | L4, L40, RTX 4090 | `flashinfer` | 1 | one slot id per token |" in rows
    forced = forced_page_sizes_table(("trtllm_mha", "cutlass_mla", "fa4")).data.splitlines()
    assert forced[2] == ("| `trtllm_mha` | 16, 32, 64, 128; anything else -> 64 | "
                         "16, 32, 64; anything else -> 64 | one page id per page |")
    assert forced[3] == ("| `cutlass_mla` | not in this release | 128; anything else -> 128 | "
                         "one page id per page |")
    assert forced[4] == ("| `fa4` | 128; anything else -> 128, for a non-MLA model on sm_100 with "
                         "`--speculative-eagle-topk` (how many candidate tokens each draft step "
                         "keeps in EAGLE, a speculative-decoding method whose draft proposes a "
                         "tree of tokens) unset or at most 1, whichever of the three backend "
                         "flags names fa4 | "
                         "128; anything else -> 128, "
                         "for a non-MLA model, only through `--prefill-attention-backend fa4` | "
                         "one page id per page |")
