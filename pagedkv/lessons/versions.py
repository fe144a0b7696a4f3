"""What changed from SGLang 0.5.9 to 0.5.23, shown by running both on the same inputs.

Every behaviour field of :class:`pagedkv.releases.Release` has one demonstration here
(:data:`DEMOS`): a small case that runs pagedkv under a release and says what came out.
:func:`demonstrate` runs it under two releases; :func:`version_changes` does so for every
field where 0.5.9 and 0.5.23 differ, in field order, which makes the book's table. Since
each case reads one field, flipping that field alone changes its answer (a test checks
this for every field).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pagedkv.lessons import version_runs as runs
from pagedkv.lessons import version_runs_startup as startup
from pagedkv.releases import BEHAVIOURS, DEFAULT_RELEASE, RELEASES, SGLANG_VERSIONS, Release

OLDEST = RELEASES[SGLANG_VERSIONS[-1]]
VERSIONS = (OLDEST.name, DEFAULT_RELEASE.name)  # the table's two columns, oldest first


@dataclass(frozen=True)
class VersionRow:
    """One change: what is compared, and what each release gives on the same input."""

    change: str
    case: str
    old: str
    new: str


@dataclass(frozen=True)
class Demo:
    """One behaviour's case: the book's words for the change and the case, and the run
    (a release in, what it did in words out)."""

    change: str
    case: str
    run: Callable[[Release], str]


DEMOS: dict[str, Demo] = {
    "extra_page_per_request": Demo(
        "every admitted request costs one page more",
        "a 3,000-token prompt, max_new_tokens 2,000, pages of 64", runs.admission_charge),
    "ignore_eos_reserves_all": Demo(
        "a running ignore-EOS request reserves all it has left",
        "100 tokens to go, new_token_ratio 0.5", runs.ignore_eos_reservation),
    "max_prefill_tokens_with_chunking": Demo(
        "with chunked prefill, max_prefill_tokens admits the request that reaches or crosses it",
        "two 60-token prompts, max_prefill_tokens 100, chunks of 1,000",
        runs.prefill_budget_with_chunking),
    "chunk_ends_on_page_boundary": Demo(
        "a chunk ends where the sequence fills a page",
        "a 100-token prompt, 6 tokens already computed, chunks of 32, pages of 16", runs.chunk_end),
    "prefill_log_raw_tokens": Demo(
        "the prefill log counts raw tokens", "a 23-token prompt, pages of 16", runs.new_token_log),
    "prefill_log_pending_tokens": Demo(
        "the prefill log shows the tokens still to prefill",
        "a 23-token prompt: the fields after #queue-req", runs.prefill_log_fields),
    "cap_max_new_tokens_by_pool": Demo(
        "max_new_tokens is capped by the pool at arrival (chapter 4, \"What SGLang does\")",
        "a 200-token prompt asking for 100 on a 256-token pool, pages of 16", runs.max_new_tokens_cap),
    "allocatable_counts_free_rows": Demo(
        "a pass admits no more requests than there are free rows",
        "max_running_requests 4, one row held outside the batch", runs.allocatable),
    "filter_finished_every_step": Demo(
        "finished requests leave the batch at the start of every step",
        "two requests; one has just finished in a decode step", runs.filter_finished),
    "batch_full_only_when_busy": Demo(
        "an empty batch that admits nothing is not full",
        "a 40-token prompt, 24 of 64 slots free, nothing running", runs.batch_full),
    "stop_pass_at_spent_budget": Demo(
        "a pass stops at a spent chunk budget before matching the next request",
        "a 100-token prompt in chunks of 32, then a request sharing its first 40 tokens",
        runs.spent_budget),
    "touch_waiting_prefixes": Demo(
        "the prefixes of waiting requests are kept fresh",
        "two cached 5-token prompts; a waiting request shares the older one; a 51-token "
        "prompt needs one evicted", runs.touch_waiting),
    "abort_last_request": Demo(
        "a request that cannot decode alone is aborted", "one request, no free page",
        runs.last_request),
    "reset_ratio_only_when_idle": Demo(
        "new_token_ratio is reset only when the server is idle",
        "new_token_ratio 0.30, nothing running, one request waiting", runs.ratio_reset),
    "group_prefill_frees": Demo(
        "a prefill pass frees its finished requests in one group",
        "two 8-token prompts that finish at their first token, pages of 4, radix cache off",
        runs.prefill_frees),
    "skip_finishing_decode_in_flight": Demo(
        "the overlap loop skips a decode step instead of retracting when only requests "
        "finishing in flight are short of room",
        "two 2-token prompts, max_new_tokens 7 and 8, a 16-token pool, "
        "schedule_conservativeness 0.1", runs.finishing_in_flight),
    "req_pool_padding_row": Demo(
        "row 0 of the page table pads and is never handed out",
        "a page table for 2 requests", runs.padding_row),
    "req_pool_reuses_last_freed": Demo(
        "the row freed last is reused first",
        "3 request rows: two taken, the first of them freed, one more request", runs.row_reuse),
    "free_order": Demo(
        "freed pages return in row order, not sorted",
        "two finished requests holding pages 5, 2, 7 and 1, 3, 4", runs.free_order),
    "evict_until_free": Demo(
        "eviction frees only what is missing",
        "a pool of 60, 15 tokens cached in three leaves, a 46-token prompt, then a repeat of "
        "a cached prompt", runs.eviction_amount),
    "split_output_from_prompt": Demo(
        "a cached answer is split from its prompt",
        "a re-prefill over a 5-token prompt and 3 outputs", runs.prompt_split),
    "chunked_prefill_size_20_35_gib": Demo(
        "bigger prefill chunks on 20-35 GiB cards", "an RTX 4090 (24 GB)", startup.chunk_default),
    "cuda_graph_max_bs_20_35_gib": Demo(
        "bigger decode CUDA graphs on 20-35 GiB cards", "an RTX 4090 (24 GB), tp 1",
        startup.graph_default),
    "prefill_cuda_graph_reserve": Demo(
        "memory is kept aside for prefill CUDA graphs", "an H100, tp 1",
        startup.prefill_graph_reserve),
    "req_to_token_rows_are_cap": Demo(
        "the page table hands out max_running_requests rows",
        "Qwen3-4B on an RTX 4090, `--max-total-tokens` 1000", startup.rows_are_cap),
    "req_rows_from_final_pool": Demo(
        "the request rows count the final pool, not the profiled one",
        "Qwen3-4B on an H100, `--max-total-tokens` 100000", startup.rows_from_final_pool),
    "null_head_dim_sized": Demo(
        "a Mistral or Mixtral config without head_dim starts",
        "Mixtral-8x7B (no head_dim in its config) on two H100s", startup.null_head_dim),
    "context_len_skips_layered_rope": Demo(
        "Gemma 3's context length leaves out its rope scaling factor (`rope_scaling`'s "
        "`factor`, by which a model stretches its rotary position embedding to longer contexts)",
        "Gemma-3-27B on an H100", startup.layered_rope_context),
    "cap_running_at_half_pool": Demo(
        "`--max-running-requests` is capped at half the pool",
        "`--max-running-requests` 4000 on a 1,000-token pool", startup.running_cap),
    "page_pool_before_cap": Demo(
        "the profiled pool is paged before `--max-total-tokens` caps it",
        "Qwen3-4B on an RTX 4090 at mem_fraction_static 0.80, pages of 64, "
        "`--max-total-tokens` above the pool",
        startup.paged_before_cap),
    "sized_by_pool_configurator": Demo(
        "a pool configurator class sizes the pools",
        "Qwen3-4B on an RTX 4090 at mem_fraction_static 0.80", startup.sizer),
    "multimodal_kv_reservation": Demo(
        "a multimodal model keeps 100 MiB of the KV budget for image features",
        "Gemma-3-27B with `--enable-multimodal`, 79 GiB free before the weights and 40 GiB after",
        startup.multimodal_reserve),
    "swa_sized_by_configurator": Demo(
        "a sliding-window hybrid's budget is split by a configurator",
        "gpt-oss-20b with 79 GiB free before the weights and 40 GiB after, "
        "`--max-total-tokens` 100000", startup.swa_split),
    "swa_pool_lines_labelled": Demo(
        "the full and SWA pools' lines say which is which",
        "gpt-oss-20b with 79 GiB free before the weights and 40 GiB after", startup.swa_lines),
    "mamba_share_keeps_padding_slot": Demo(
        "the state share also holds the padding slot",
        "Qwen3-Next-80B-A3B at tp 4, 79 GiB free before the weights and 40 GiB after",
        startup.state_slots),
    "mamba_cap_warns": Demo(
        "a cap on running requests by the state slots is said",
        "Qwen3-Next-80B-A3B at tp 4, 79 GiB free before the weights and 40 GiB after",
        startup.mamba_cap_line),
    "mamba_auto_extra_buffer": Demo(
        "the radix cache's default strategy for a linear-attention hybrid adds two track slots "
        "per request (copies of its state kept for the radix tree; chapter 9)",
        "Qwen3-Next-80B-A3B with the radix cache, the overlap loop on, pages of one token",
        startup.mamba_slots_counted),
    "mamba_slots_taken_ahead": Demo(
        "each prefill pass takes a state slot ahead per waiting request (and puts it back)",
        "Qwen3-Next, 3 state slots, at most 2 running: three 8-token prompts with 2, 40 and 2 "
        "new tokens", runs.slots_taken_ahead),
    "retract_log_counts_mamba_slots": Demo(
        "the retraction line counts the state slots given back",
        "Qwen3-Next, 6 state slots, a KV pool of 128 tokens: six 8-token prompts with "
        "max_new_tokens 50, schedule_conservativeness 0.1", runs.retract_line),
    "kv_dtype_in_allocation_log": Demo(
        "the allocation log line names the KV dtype",
        "Qwen3-4B on an RTX 4090 at mem_fraction_static 0.80 (N tokens)", startup.allocation_log),
    "weights_leave_no_memory_error": Demo(
        "weights that fill the budget get their own error",
        "Qwen3-4B on an RTX 4090 at mem_fraction_static 0.20", startup.weights_error),
    "attention_backends": Demo(
        "cutlass_mla is gone (cutedsl_mla and hpc_ops are new)",
        "`--attention-backend` cutlass_mla, no `--page-size`", startup.offered),
    "forced_page_sizes": Demo(
        "trtllm_mha accepts pages of 128", "`--attention-backend` trtllm_mha `--page-size` 128",
        startup.forced_page),
    "fa4_for_asymmetric_kv": Demo(
        "fa4 by default for K and V of different widths on sm_100",
        "a B200, K and V rows of different widths", startup.fa4),
    "flashinfer_avoids_attention_sinks": Demo(
        "no FlashInfer by default for a model with attention sinks and no backend rule of its own",
        "an L40 (sm_89), a model with attention sinks and no rule of its own, e.g. MiMo-V2-Flash "
        "(gpt-oss has its own rule in both releases: triton here)", startup.sinks),
    "gpt_oss_aiter_on_rocm": Demo(
        "gpt-oss's own backend rule gives AMD GPUs aiter",
        "gpt-oss on an MI300X, no `--attention-backend`", startup.gpt_oss_rocm),
    "dsa_attention_backend": Demo(
        "the backend of DeepSeek V3.2's sparse attention (DSA, which 0.5.9 calls NSA: a small "
        "indexer picks the cached tokens each query attends to) is renamed, and an fp8 KV cache "
        "is prefilled by another backend",
        "DeepSeek-V3.2 on eight H200 with an fp8_e4m3 KV cache", startup.dsa_backends),
    "dsa_fp8_latent_profiled_as_stored": Demo(
        "an fp8 DeepSeek V3.2 pool is sized by the bytes it stores (scales, bf16 rope)",
        "DeepSeek-V3.2 on eight H200 with an fp8_e4m3 KV cache", startup.dsa_fp8_cell),
}


def demonstrate(behaviour: str, old: Release | None = None, new: Release | None = None
                ) -> VersionRow:
    """``behaviour``'s case run under ``old`` (default the oldest release) and ``new``
    (default :data:`~pagedkv.releases.DEFAULT_RELEASE`).

    Raises:
        KeyError: ``behaviour`` is not a field of :class:`~pagedkv.releases.Release`.
    """
    demo = DEMOS[behaviour]
    return VersionRow(demo.change, demo.case, demo.run(old or OLDEST), demo.run(new or DEFAULT_RELEASE))


def admission_charge() -> VersionRow:
    """A 3,000-token prompt with ``max_new_tokens`` 2,000 on 10,048 free slots, pages of 64."""
    return demonstrate("extra_page_per_request")


def prefill_budget_with_chunking() -> VersionRow:
    """Two 60-token prompts, ``max_prefill_tokens`` 100, chunks of 1,000."""
    return demonstrate("max_prefill_tokens_with_chunking")


def new_token_log() -> VersionRow:
    """The prefill log's ``#new-token`` for a 23-token prompt in pages of 16."""
    return demonstrate("prefill_log_raw_tokens")


def eviction_amount() -> VersionRow:
    """Three finished 5-token requests cached as three leaves; a 46-token prompt needs one of
    them evicted; then a request that shares the third one's tokens arrives."""
    return demonstrate("evict_until_free")


def free_order() -> VersionRow:
    """Free-list head after two requests finish together, pages of 4, on a pool whose free
    list was left shuffled by earlier frees (their pages are not in ascending row order)."""
    return demonstrate("free_order")


def prompt_split() -> VersionRow:
    """Nodes in the tree after a retracted request is prefilled again over prompt + output."""
    return demonstrate("split_output_from_prompt")


def last_request() -> VersionRow:
    """A lone request whose next decode needs a page the pool does not have."""
    return demonstrate("abort_last_request")


def chunk_default() -> VersionRow:
    """``chunked_prefill_size`` on a 24 GB card."""
    return demonstrate("chunked_prefill_size_20_35_gib")


def version_changes() -> list[VersionRow]:
    """Every row of the book's table: each behaviour where the oldest and the newest release
    differ, in :class:`~pagedkv.releases.Release` field order, computed by running both."""
    return [demonstrate(b) for b in BEHAVIOURS
            if getattr(OLDEST, b) != getattr(DEFAULT_RELEASE, b)]
