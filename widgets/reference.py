"""The book's reference pages, generated so that they cannot drift from pagedkv: the glossary
(:data:`pagedkv.lessons.glossary.TERMS`), chapter 1's list of first words, and the cheat sheet
(formulas with SGLang's constants filled in from :class:`SchedulerConfig`, the constants with
their reasons and sources, the defaults, and what changed between the two SGLang releases,
one row per differing field of :class:`pagedkv.releases.Release`)."""

from __future__ import annotations

from IPython.display import Markdown

from pagedkv.configs.dsa_config import (
    QUANT_BLOCK_SIZE,
    ROPE_STORAGE_BYTES,
    SCALE_BYTES,
    indexer_bytes_per_token,
)
from pagedkv.configs.model_presets import load_model
from pagedkv.errors import bad_value
from pagedkv.hybrid_pools import (
    MAMBA_SLOTS_PER_REQUEST_WITH_RADIX,
    mamba_slots_per_request,
    mamba_tracking_slots,
)
from pagedkv.lessons.cheat_sheet import constant_rows
from pagedkv.lessons.glossary import (
    NEWEST_TOKEN_RULE,
    TERMS,
    ignore_eos_rule,
    term_chapter,
    terms_of_chapter,
)
from pagedkv.lessons.version_runs_startup import dsa_fp8_plan
from pagedkv.managers.config import SchedulerConfig
from pagedkv.releases import DEFAULT_RELEASE, RELEASES, SGLANG_VERSIONS, describe, differences
from pagedkv.sizing import plan_pool
from pagedkv.workloads.cases import LONG_ANSWERS
from pagedkv_widgets.catalog import gpu_label, model_label
from pagedkv_widgets.tables import markdown_table

#: The state slots SGLang 0.5.23's default server counts per running request of a
#: linear-attention hybrid with the radix cache (its extra_buffer strategy, the overlap loop on).
_DEFAULT_SLOTS = mamba_slots_per_request(False, mamba_tracking_slots(
    disable_radix_cache=False, page_size=1, disable_overlap_schedule=False,
    auto_extra_buffer=DEFAULT_RELEASE.mamba_auto_extra_buffer))

def terms_md(chapter: int) -> Markdown:
    """The terms ``chapter`` introduces, as a list, then the newest-token rule (chapter 1).

    Raises:
        pagedkv.errors.ConfigError: ``chapter`` is not 1-9, or introduces no term.
    """
    terms = tuple(t for t in terms_of_chapter(chapter) if t.listed)
    if not terms:
        raise bad_value("chapter", chapter, "a chapter that introduces terms")
    lines = [f"- **{t.name}**: {t.definition}" for t in terms]
    if chapter == 1:
        lines.append(f"\n**The newest token.** {NEWEST_TOKEN_RULE}")
    return Markdown("\n".join(lines))


def glossary_md() -> Markdown:
    """Every term, alphabetically, with the chapter that introduces it and SGLang's name."""
    rows = sorted(TERMS, key=lambda t: t.name.strip("`#").lower())
    return markdown_table(("term", "meaning", "chapter", "in SGLang"),
                          ((t.name, t.definition, t.chapter, t.source or "-") for t in rows))


def constants_md(config: SchedulerConfig | None = None) -> Markdown:
    """SGLang's five scheduler constants: value (read from ``config``), what it gives, why it
    is there, and where SGLang sets it."""
    return markdown_table(("SGLang variable", "default", "gives", "why it is there", "source"),
                          constant_rows(config))


def formulas_md(config: SchedulerConfig | None = None) -> Markdown:
    """The book's formulas, one line each, with the constants of ``config`` filled in."""
    c = config or SchedulerConfig()
    clip, n20 = c.clip_max_new_tokens, c.retract_decode_steps
    dim = load_model("deepseek-v3.2").index_head_dim
    key = indexer_bytes_per_token(dim)
    rows = [
        ("bytes per token (cell size)", r"$2 \cdot L \cdot H_{kv} \cdot d_{head} \cdot \text{bytes}$; "
         r"MLA: $(\text{kv_lora_rank} + \text{qk_rope_head_dim}) \cdot L \cdot \text{bytes}$; "
         rf"DeepSeek-V3.2 adds $L \cdot {key}$ B, its index key: {dim} fp8 bytes plus a "
         rf"{SCALE_BYTES}-byte scale per {QUANT_BLOCK_SIZE} of them, in any KV dtype; "
         + dsa_fp8_cell_words(), 1),
        ("pool from two free-memory readings", r"$\text{rest} = \text{post} - \text{pre} \cdot (1 - f)$, "
         r"$\text{max_total_num_tokens} = \lfloor \text{rest} / \text{cell} \rfloor$, rounded down "
         "to whole pages", 1),
        ("pool on an empty card", r"$f \cdot \text{HBM} - \text{weights}$", 1),
        ("batch cap", r"$B_{\max} = \lfloor \text{pool} / (c \cdot \text{cell}) \rfloor$ at context $c$ "
         "(a hybrid: the smallest such count over its pools, at most `max_running_requests`, "
         "chapter 9)", 1),
        ("longest prompt", r"$\min(\text{context}, \text{max_total_num_tokens}) - 7$", 1),
        ("KV a request holds", r"$\text{kv_len} = \text{seq_len} - 1$ between steps", 1),
        ("pages a prefill opens", r"$\lceil \text{seq_len}/p \rceil - \lceil \text{prefix_len}/p \rceil$", 3),
        ("a running request's reservation",
         rf"$\min(\text{{max_new_tokens}} - \text{{generated}}, {clip}) \cdot \text{{new_token_ratio}}$. "
         + ignore_eos_rule("an ignore-EOS request"), 4),
        ("admission room", r"$R = \text{available_size} + \text{evictable} - \text{reservations} - "
         r"\text{charges so far}$", 4),
        ("a newcomer is refused (`NO_TOKEN`)",
         rf"$e + \min(m - g, {clip}) + p \ge R$ (0.5.9: without $+\,p$)", 4),
        ("its charge", rf"$\lceil e \rceil_\text{{page}} + p + \min(m, {clip})$ (0.5.9: without $+\,p$)", 4),
        ("ratio over time", rf"start $\min({c.init_new_token_ratio:g} \cdot \text{{conservativeness}}, 1)$, "
         rf"floor $\times {c.min_new_token_ratio_factor:g}$, down by "
         rf"$(\text{{start}} - \text{{floor}}) / {c.new_token_ratio_decay_steps}$ per decode step", 4),
        ("ratio after a retraction",
         rf"$\min\!\big(1, (\sum \text{{decoded}} + {n20} n) / (\sum \text{{max_new_tokens}} + 1)\big)$ "
         "over the $n$ requests that stay", 5),
        ("tokens the next decode step needs",
         r"$p \cdot \#\{\text{running requests with } \text{kv_len} \bmod p = 0\}$", 5),
        ("token usage (log lines)", r"$(\text{max_total_num_tokens} - \text{available} - "
         r"\text{evictable}) / \text{max_total_num_tokens}$", term_chapter("token usage")),
        ("running requests of a linear-attention hybrid",
         r"$\min(\text{max_running_requests}, \lfloor \text{state slots} / s \rfloor)$, $s$ state "
         f"slots per request ({_DEFAULT_SLOTS} by default: {MAMBA_SLOTS_PER_REQUEST_WITH_RADIX} "
         f"and {_DEFAULT_SLOTS - MAMBA_SLOTS_PER_REQUEST_WITH_RADIX} track slots; 1 with "
         "`--disable-radix-cache`; SGLang 0.5.23)", 9),
    ]
    return markdown_table(("what", "formula", "chapter"), rows)


def dsa_fp8_cell_words() -> str:
    """The cheat sheet's exception to the MLA formula: DeepSeek V3.2 with an fp8_e4m3 KV cache,
    whose latent a release with ``Release.dsa_fp8_latent_profiled_as_stored`` sizes as its pool
    stores it (SGLang 0.5.23 ``kv_cache_configurator.py`` ``calculate_mla_kv_cache_dim``), and
    the bytes per token of each release on the start the release table runs
    (:func:`pagedkv.lessons.version_runs_startup.dsa_fp8_plan`)."""
    stored = [r.name for r in RELEASES.values() if r.dsa_fp8_latent_profiled_as_stored]
    raw = [r.name for r in RELEASES.values() if not r.dsa_fp8_latent_profiled_as_stored]
    sizes = ", ".join(f"{dsa_fp8_plan(RELEASES[v]).cell_size:,} B in SGLang {v}"
                      for v in reversed(SGLANG_VERSIONS))
    return ("with an fp8_e4m3 KV cache, SGLang " + " and ".join(stored) + " counts V3.2's latent "
            r"as its pool stores it, $\text{kv_lora_rank} + " + str(SCALE_BYTES)
            + r" \lfloor \text{kv_lora_rank} / " + str(QUANT_BLOCK_SIZE) + r" \rfloor + "
            + str(ROPE_STORAGE_BYTES) + r" \cdot \text{qk_rope_head_dim}$ bytes per layer (the fp8 "
            "latent, its float32 scales, the rope part in bf16), where "
            + " and ".join(raw) + " takes the MLA formula at 1 byte: V3.2 in fp8_e4m3 is "
            + sizes + " per token (the release table below)")


def defaults_md(config: SchedulerConfig | None = None) -> Markdown:
    """The server settings the book varies, with SGLang's default (from ``config``)."""
    c = config or SchedulerConfig()
    rows = [
        ("`--mem-fraction-static`", "by the card's memory (chapter 1)"),
        ("`--page-size`", "1"),
        ("`--chunked-prefill-size`", f"by the card's memory; {c.chunked_prefill_size:,} on an H100"),
        ("`--max-prefill-tokens`", f"{c.max_prefill_tokens:,}"),
        ("`--max-running-requests`", max_running_default()),
        ("`--schedule-conservativeness`", f"{c.schedule_conservativeness:g}"),
        ("radix cache", "on (`--disable-radix-cache` turns it off)"),
    ]
    return markdown_table(("setting", "default"), rows)


def max_running_default() -> str:
    """``--max-running-requests`` left unset, release by release: the rule's two
    ``Release`` fields in words (``req_rows_from_final_pool``, ``cap_running_at_half_pool``)
    and the value SGLang sizes for the book's running case (:data:`LONG_ANSWERS`)."""
    case = LONG_ANSWERS
    where = (f"{model_label(case.model)} on an {gpu_label(case.gpu)} at "
             f"`mem_fraction_static` {case.mem_fraction_static:.2f}")
    parts = []
    for r in RELEASES.values():
        plan = plan_pool(case.model, gpu=case.gpu, mem_fraction_static=case.mem_fraction_static,
                         sglang_version=r)
        parts.append(f"SGLang {r.name}: {plan.max_running_requests:,} for {where}, sized "
                     f"{describe(r, 'req_rows_from_final_pool')}; a value set with the flag: "
                     f"{describe(r, 'cap_running_at_half_pool')}")
    return ("from the pool and the context length (chapter 1), at most half the pool's tokens. "
            + ". ".join(parts) + ".")


def releases_md() -> Markdown:
    """What pagedkv switches between the oldest release it follows and the default one, one row
    per differing field of :class:`pagedkv.releases.Release`, with the default's source."""
    old, new = RELEASES[SGLANG_VERSIONS[-1]], DEFAULT_RELEASE
    return markdown_table(("behaviour", old.name, new.name, f"where in {new.name}"),
                          ((what, a, b, f"`{where}`") for what, a, b, where in differences(old, new)))

