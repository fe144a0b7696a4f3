"""Markdown tables for the book: each builder takes pagedkv results and returns ``Markdown``.

A notebook cell ends with the builder's call and Jupyter renders the table; ``.data`` holds the
markdown text (what the tests read).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from IPython.display import Markdown

from pagedkv.releases import DEFAULT_SGLANG_VERSION, RELEASES, SGLANG_VERSIONS


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> Markdown:
    """A pipe table: ``header`` cells, then one line per row (cells formatted with ``str``).

    A ``|`` inside a cell (a flag's choices, ``a|b``) is escaped, so that it stays in its cell,
    code spans included, instead of splitting the row."""
    lines = ["| " + " | ".join(_cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return Markdown("\n".join(lines))


def _cell(value: object) -> str:
    return re.sub(r"(?<!\\)\|", r"\\|", str(value))


def shares_table(shares: Sequence[object]) -> Markdown:
    """Chapter 2: ``pagedkv.lessons.fragmentation.MemoryShare`` per scheme, shares in percent."""
    cols = ("tokens", "held_ahead", "internal", "external", "free")
    return markdown_table(("scheme", *(c.replace("_", " ") for c in cols)),
                          ([getattr(s, "label", s.scheme), *(f"{getattr(s, c):.1%}" for c in cols)]
                           for s in shares))


def page_cost_table(costs: Sequence[object]) -> Markdown:
    """Chapter 3: ``pagedkv.lessons.fragmentation.PageSizeCost`` per page size."""
    return markdown_table(("p", "tokens", "slots held", "wasted", "entries (pages)"),
                          ((c.page_size, f"{c.tokens:,}", f"{c.held_slots:,}",
                            f"{c.wasted_pct:.1f} %", f"{c.pages:,}") for c in costs))


def admissions_table(adder: object) -> Markdown:
    """Chapter 4: one line per request a ``PrefillAdder`` admitted in its pass."""
    return markdown_table(("#", "tokens prefilled now", "charged", "chunk?"),
                          ((i, f"{r.extend_len:,}", f"{c:,.0f}",
                            "cut here" if r is adder.new_chunked_req else "")
                           for i, (r, c) in enumerate(zip(adder.can_run_list, adder.charges,
                                                          strict=True))))


def conservativeness_table(runs: Mapping[float, object]) -> Markdown:
    """Chapter 4: one line per ``schedule_conservativeness`` run (``EngineResult``)."""
    return markdown_table(
        ("conservativeness", "ratio start -> floor", "output tokens/s (model)", "retractions",
         "recomputed tokens", "mean queueing (s)", "mean pool use"),
        ((c, f"{r.config.init_ratio:.2f} -> {r.config.min_ratio:.3f}",
          f"{r.metrics.output_tokens_per_s:,.0f}", r.metrics.num_retractions,
          f"{r.metrics.recomputed_tokens:,}", f"{r.metrics.mean_queue_s:.1f}",
          f"{r.metrics.mean_usage:.0%}") for c, r in runs.items()))


def episodes_table(episodes: Mapping[str, object], floor: float) -> Markdown:
    """Chapter 4: ``pagedkv.lessons.analysis.Episodes`` per named run."""
    return markdown_table(
        ("run", "retraction episodes", f"began at the floor ({floor:.3f})",
         "median decode steps between starts", "gaps within 500-700 steps"),
        ((name, e.count, e.at_floor, f"{float(_median(e.gaps)):.0f}",
          f"{e.gaps_within(500, 700)} of {len(e.gaps)}") for name, e in episodes.items()))


def _median(values: Sequence[float]) -> float:
    s = sorted(values)
    if not s:
        return float("nan")
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def batch_table(rows: Sequence[object]) -> Markdown:
    """Chapter 5: the running batch before a decode step (``analysis.BatchRow``)."""
    return markdown_table(("request", "prompt", "outputs so far", "kv_len", "pages held",
                           "new page this step?"),
                          ((r.rid, r.prompt_len, r.outputs, r.kv_len,
                            ", ".join(map(str, r.pages)), "yes" if r.new_page else "")
                           for r in rows))


def policy_table(metrics: Mapping[tuple[str, str], object]) -> Markdown:
    """Chapter 5: ``Metrics`` per ``(clients send, policy)``."""
    return markdown_table(
        ("clients send", "policy", "output tokens/s (model)", "retractions",
         "recomputed tokens", "mean queueing (s)", "mean latency (s)", "mean pool use"),
        ((w, f"`{p}`", f"{m.output_tokens_per_s:,.0f}", f"{m.num_retractions:,}",
          f"{m.recomputed_tokens:,}", f"{m.mean_queue_s:.1f}", f"{m.mean_latency_s:.1f}",
          f"{m.mean_usage:.0%}") for (w, p), m in metrics.items()))


def _own_plus_evicted(acc: object) -> str:
    """``own + evicted = gained`` rounded so that the shown numbers add up."""
    own, gained = round(acc.own), round(acc.gained)
    return f"{own:,} own + {gained - own:,} evicted = {gained:,}"


def case_study_table(study: object, busy_rate: float, calm_rate: float) -> Markdown:
    """Chapter 5: the running case at each card speed of ``examples.CaseStudy``, seeds in
    order; ``busy_rate`` and ``calm_rate`` label its two loads (requests/s)."""
    cols = study.columns

    def joined(values: Iterable[object]) -> str:
        return " / ".join(str(v) for v in values)

    busy, calm = f"at {busy_rate:g} req/s", f"at {calm_rate:g} req/s"
    return markdown_table(
        [""] + [f"{c.efficiency:.0%} of peak" for c in cols],
        [[f"{busy}: `new_token_ratio` after the first retraction (seeds 0 / 1 / 2)"]
         + [joined(c.first_ratio) for c in cols],
         [f"{busy}: KV tokens regained per retraction (mean)"]
         + ["-" if c.accounting is None else _own_plus_evicted(c.accounting) for c in cols],
         [f"{busy}: retractions (seeds 0 / 1 / 2)"] + [joined(c.retractions) for c in cols],
         [f"{calm}: retractions (seed 0)"] + [str(c.calm_retractions) for c in cols]])


def admission_state_md(batch: object, state: object, ratio: float, clip: int) -> Markdown:
    """Chapter 4's worked example: pool, use, one request's reservation, ``rem_total_tokens``.

    ``batch`` is an ``admission.UniformBatch``, ``state`` its ``admission.AdmissionState``.
    """
    b, s = batch, state
    return Markdown(
        f"- pool: **{s.pool:,}** tokens; in use: {b.n} x {b.kv_len} = **{b.tokens_used:,}** "
        f"({b.tokens_used / s.pool:.0%}); `available_size` = **{s.available:,}**\n"
        f"- each running request reserves min({b.max_new_tokens} - {b.generated}, {clip}) x "
        f"{ratio} = **{s.per_request:,.1f}** tokens; all {b.n}: **{s.reserved:,.0f}**\n"
        f"- `rem_total_tokens` = {s.available:,} - {s.reserved:,.0f} = "
        f"**{s.rem_total_tokens:,.0f}**")


def ratio_sweep_table(rows: Sequence[object]) -> Markdown:
    """Chapter 4: ``admission.SweepRow`` per ``new_token_ratio``."""
    return markdown_table(("new_token_ratio", "free", "reserved", "rem_total_tokens", "admitted",
                           "pass ended by"),
                          ((f"{r.ratio:.3f}", f"{r.state.available:,}", f"{r.state.reserved:,.0f}",
                            f"{r.state.rem_total_tokens:,.0f}", r.admitted, r.result.name)
                           for r in rows))


def first_retraction_md(first: object) -> Markdown:
    """Chapter 5: who ``retract_decode`` chose first, and the ratio it set
    (``analysis.FirstRetraction``)."""
    f = first
    if not f.tied_with:
        tie = ""
    elif len(f.tied_with) == 1:
        tie = (f" (tied with request {f.tied_with[0]}, whose prompt of {f.tied_prompts[0]} tokens is "
               f"shorter than its {f.victim_prompt})")
    else:
        names = ", ".join(map(str, f.tied_with[:-1])) + f" and {f.tied_with[-1]}"
        sizes = ", ".join(map(str, f.tied_prompts[:-1])) + f" and {f.tied_prompts[-1]}"
        tie = (f" (tied with requests {names}, whose prompts of {sizes} tokens are all "
               f"shorter than its {f.victim_prompt})")
    stay = len(f.rows) - 1
    pages = -(-f.freed // f.page_size)
    kept = (f"; the radix cache keeps the {f.kept} tokens of its prompt it already held "
            f"({f.kept // f.page_size} pages), so **{f.gained}** slots come back to the free list "
            "(the log's `#new_tokens_gained`)" if f.kept else
            f", and **{f.gained}** slots come back to the free list")
    return Markdown(
        f"- victim: request **{f.victim}**, with {f.output_len} outputs, the fewest in the batch"
        f"{tie}; it held {f.freed} KV tokens in {pages} pages{kept}\n"
        f"- ratio over the {stay} that stay: min(1, ({f.decoded} + {f.retract_steps} x {stay}) / "
        f"({f.budget} + 1)) = **{f.ratio:.4f}**")


def strip_text(frames: Sequence[tuple[str, Sequence[str]]], width: int = 22) -> str:
    """Slot strips as text, one line per ``(caption, slot labels)``: each slot shows its
    label's first character, ``.`` when free (chapter 2's contiguous replay)."""
    return "\n".join(f"{caption:{width}s} " + " ".join(f"{lab[:1] or '.':>2s}" for lab in labels)
                     for caption, labels in frames)


def lookups_text(lookups: Sequence[object]) -> str:
    """Chapter 3: one line per ``scenarios.Lookup`` read of the page table."""
    return "\n".join(f"page_table[{x.row}, {x.pos}] = {x.slot:2d} -> {x.name} token {x.word!r} "
                     f"has its K/V at physical slot {x.slot}" for x in lookups)


def prefix_runs_table(runs: Mapping[str, object]) -> Markdown:
    """Chapter 8: ``pagedkv.lessons.prefix_runs.PrefixRun`` per run: what the cache reused."""
    return markdown_table(
        ("run", "prompt tokens", "served from the tree", "hit rate", "slots evicted",
         "most running at once", "peak slots held by running requests", "retractions",
         "steps"),
        ([label, f"{r.prompt_tokens:,}", f"{r.reused_tokens:,}", f"{r.hit_rate:.1%}",
          f"{r.evicted:,}", r.max_running_reqs, f"{r.peak_held:,}", r.retractions,
          f"{r.num_steps:,}"] for label, r in runs.items()))


def version_changes_table(rows: Sequence[object]) -> Markdown:
    """Chapter 5: ``versions.VersionRow`` per change, 0.5.9 next to 0.5.23 on one input."""
    old, new = SGLANG_VERSIONS[-1], SGLANG_VERSIONS[0]
    return markdown_table(("what changed", "the same input", f"SGLang {old}", f"SGLang {new}"),
                          ([r.change, r.case, r.old, r.new] for r in rows))


def _indexing(backend: str) -> str:
    from pagedkv.lessons.attention_backends import BACKENDS

    return {"token": "one slot id per token", "page": "one page id per page"}.get(
        BACKENDS[backend].indexes, "not covered here")


def attention_backends_table() -> Markdown:
    """Chapters 3 and 6: per GPU class, the attention backend SGLang picks by default for an
    MHA model (0.5.23, and 0.5.9 where it differs), the page size that follows, and how the
    backend's kernel is handed the KV pool (``pagedkv.lessons.attention_backends``)."""
    from pagedkv.lessons.attention_backends import BACKENDS, backend_rows, resolve_page_size

    rows = []
    for g, new, old in backend_rows():
        page = resolve_page_size(new, None, DEFAULT_SGLANG_VERSION)
        handed = _indexing(new)
        if BACKENDS[new].indexes == "page" and page == 1:
            handed += " (at page size 1, one per token)"
        backend = f"`{new}`" if new == old else f"`{new}` ({SGLANG_VERSIONS[-1]}: `{old}`)"
        rows.append([g.label, g.examples, backend, page, handed])
    return markdown_table(("GPU class", "for example",
                           f"default backend (SGLang {DEFAULT_SGLANG_VERSION})",
                           "page size when `--page-size` is not given", "the kernel is handed"), rows)


def forced_page_sizes_table(backends: Sequence[str] = ("trtllm_mha", "flashmla", "trtllm_mla",
                                                         "cutedsl_mla", "cutlass_mla", "fa4",
                                                         "hpc_ops")) -> Markdown:
    """Chapter 3: per backend and release, the page sizes it accepts and what any other
    ``--page-size`` (or none) becomes (``pagedkv.lessons.attention_backends``)."""
    from pagedkv.errors import ConfigError
    from pagedkv.lessons.attention_backends import forced_page_size_when, forced_page_sizes

    def cell(backend: str, v: str) -> str:
        try:
            rule = forced_page_sizes(backend, v)
        except ConfigError:
            return "not in this release"
        if rule is None:
            return "any"
        accepted, forced = rule
        when = forced_page_size_when(backend, v)
        return f"{', '.join(map(str, accepted))}; anything else -> {forced}" + (f", {when}" if when else "")

    return markdown_table(("backend", *(f"SGLang {v}" for v in RELEASES), "the kernel is handed"),
                          ([f"`{b}`", *(cell(b, v) for v in RELEASES), _indexing(b)]
                           for b in backends))


def decode_step_md(worked: object) -> Markdown:
    """Chapter 5: one decode step's memory decisions, stage by stage
    (``pagedkv.lessons.decode_step.WorkedDecodeStep``)."""
    w = worked
    what = {"before the step": "count the pages the step opens: one per request whose `kv_len` "
                               f"is a multiple of {w.page_size}",
            "check_decode_mem": "evict unlocked cached tokens from the radix cache, then compare",
            "retract_decode": "pop victims off the end of the order, release each "
                              "(`release_req`), until the rest fits",
            "prepare_for_decode": "ask the tree for room for a page per request (its need), "
                                  "evicting what the free list lacks; take the step's slots"}
    table = markdown_table(("stage", "what SGLang does", "free slots", "evictable tokens",
                            "slots asked for", "result"),
                           ((f"`{s.name}`" if "_" in s.name else s.name, what[s.name], s.free,
                             s.evictable, s.need, s.note) for s in w.stages))
    old, new = w.ratio
    head = (f"Step {w.step}, page size {w.page_size}. Retraction order, kept first: "
            f"{', '.join(map(str, w.order))}; retracted: {', '.join(map(str, w.victims))}; "
            f"`new_token_ratio` {old:.4f} -> {new:.4f}." if w.victims else
            f"Step {w.step}, page size {w.page_size}: the step fits, nobody is retracted.")
    return Markdown(head + "\n\n" + table.data)
