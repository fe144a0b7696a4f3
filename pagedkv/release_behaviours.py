"""The behaviours in which SGLang releases differ: :class:`Release`, one field per behaviour.

Each field is named for the behaviour, and its metadata says where SGLang does it
(``source``: the 0.5.23 file and function unless it names 0.5.9), what the behaviour is
(``what``, ``description``) and, for a yes/no field, what each answer means (``shows``). The
releases themselves, one :class:`Release` each, are :data:`pagedkv.releases.RELEASES`; code
reads a release's fields and never compares release names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pagedkv.errors import bad_value

FREE_ORDERS = ("sorted", "row")


def _behaviour(what: str, source: str, description: str,
               shows: tuple[str, str] | dict[object, str] | None = None,
               parts: tuple[str, ...] | None = None) -> Any:
    """A field's metadata; ``shows``: each value in words (a flag: what False, True mean);
    ``parts``: for a tuple of names, what each position is (the table labels each value)."""
    meta: dict[str, object] = {"what": what, "source": source, "description": description}
    if isinstance(shows, tuple):
        meta["shows"] = {False: shows[0], True: shows[1]}
    elif shows is not None:
        meta["shows"] = shows
    if parts is not None:
        meta["parts"] = parts
    return field(metadata=meta)


@dataclass(frozen=True, repr=False)
class Release:
    """What one SGLang release does where the releases differ (one field per behaviour).

    ``name`` is the release (``"0.5.23"``); every other field is a behaviour, documented in
    its metadata (``dataclasses.fields(Release)[i].metadata``).
    """

    name: str
    # ----- admission: managers/schedule_policy.py, managers/scheduler.py ------------------
    extra_page_per_request: bool = _behaviour(
        "admission charge per request", "mem_cache/prefill_budget.py: PrefillBudget.reserve",
        "Admission charges each newcomer one page more (per_req_token_overhead = page_size), "
        "in the newcomer test, in its charge and in the ignore-EOS check of an empty pool. The "
        "charge rounds extend up to whole pages (ceil_page); the test takes it as it is.",
        ("ceil_page(extend) + min(max_new, CLIP)",
         "ceil_page(extend) + min(max_new, CLIP) + page_size"))
    ignore_eos_reserves_all: bool = _behaviour(
        "reservation of a running ignore-EOS request",
        "managers/schedule_policy.py: PrefillAdder._get_running_request_total_token_offset",
        "A running request that ignores EOS reserves its remaining tokens at ratio 1.0 "
        "instead of new_token_ratio.", ("ratio new_token_ratio", "ratio 1.0"))
    max_prefill_tokens_with_chunking: bool = _behaviour(
        "max_prefill_tokens", "managers/schedule_policy.py: PrefillAdder.add_one_req",
        "max_prefill_tokens refuses a later request whose page-rounded prompt would reach or "
        "cross what is left of it (input_tokens >= rem_input_tokens) also when chunked prefill "
        "is on (0.5.9 tests it before the prefix lock too, as its add_one_req does). In both "
        "releases the first request of a pass is exempt, and a pass whose prompt budget is "
        "spent ends (budget_state).",
        ("refuses a later request whose page-rounded prompt would reach or cross what is left "
         "of it only without chunked prefill (with it, the default, admits it and ends the "
         "pass); the first request of a pass is exempt",
         "refuses a later request whose page-rounded prompt would reach or cross what is left "
         "of it, chunked prefill or not (before and after the prefix lock); the first request "
         "of a pass is exempt"))
    chunk_ends_on_page_boundary: bool = _behaviour(
        "a new chunk's end", "managers/schedule_policy.py: PrefillAdder.add_one_req",
        "A request cut into chunks is cut where the sequence (cached prefix + chunk) ends on "
        "a page boundary, not where the chunk alone does.",
        ("chunk length a multiple of page_size", "prefix + chunk a multiple of page_size"))
    prefill_log_raw_tokens: bool = _behaviour(
        "prefill log #new-token", "managers/schedule_policy.py: PrefillAdder._update_prefill_budget",
        "The prefill log's #new-token counts the tokens computed, not their pages.",
        ("page-rounded extend", "raw extend"))
    prefill_log_pending_tokens: bool = _behaviour(
        "prefill log fields",
        "managers/scheduler_components/metrics_reporter.py: SchedulerMetricsReporter.report_prefill_stats",
        "The prefill log line has #pending-token (tokens still to prefill) and ends with the "
        "input throughput.", ("throughput, cuda graph", "#pending-token, cuda graph, throughput"))
    cap_max_new_tokens_by_pool: bool = _behaviour(
        "max_new_tokens at arrival", "managers/scheduler.py: Scheduler.init_req_max_new_tokens",
        "At arrival max_new_tokens is also capped at max_total_num_tokens - "
        "ceil_to_page(prompt) - page_size - 1.",
        ("min(max_new, max_req_len - prompt - 1), max_req_len = min(context, pool) - 1",
         "also <= pool - prompt pages - page - 1"))
    allocatable_counts_free_rows: bool = _behaviour(
        "requests a pass may admit", "managers/scheduler.py: Scheduler.get_num_allocatable_reqs",
        "A pass admits at most the free request rows too (plus the carried chunk's); the "
        "page table hands out max_running_requests rows (0.5.9: pagedkv adds one, so that a "
        "carried chunk's row stays apart from the running batch's).",
        ("max_running - running", "also <= free rows"))
    filter_finished_every_step: bool = _behaviour(
        "finished requests leave the running batch", "managers/scheduler.py: Scheduler.get_next_batch_to_run",
        "Every step starts by dropping finished requests from the running batch (a shrink "
        "clears batch_is_full), not only at the next decode step.", ("at the next decode step", "every step"))
    batch_full_only_when_busy: bool = _behaviour(
        "batch_is_full after NO_TOKEN", "managers/scheduler.py: Scheduler._get_new_batch_prefill_raw",
        "A pass that runs out of memory marks the batch full only if something is admitted or "
        "running; an empty running batch clears the mark; with no request row left the "
        "batch is marked full when no chunk is carried (0.5.9: when one is).",
        ("always", "only if something is admitted or running"))
    stop_pass_at_spent_budget: bool = _behaviour(
        "a spent prompt or chunk budget", "managers/scheduler.py: Scheduler._get_new_batch_prefill_raw",
        "The pass stops before matching the next waiting request when the prompt or chunk "
        "budget is spent (0.5.9 matches its prefix, then refuses it).",
        ("the next request is matched, then refused", "the pass stops first"))
    touch_waiting_prefixes: bool = _behaviour(
        "waiting prefixes under FCFS", "managers/schedule_policy.py: SchedulePolicy._touch_waiting_prefixes",
        "With the tree on, every 32nd pass marks the cached prefixes of the first 128 waiting "
        "requests as just used, so eviction spares them.", ("untouched", "refreshed (LRU) every 32 passes"))
    abort_last_request: bool = _behaviour(
        "last request cannot decode", "managers/schedule_batch.py: ScheduleBatch.retract_decode",
        "When even one request cannot take its next decode step, it is aborted (its KV freed) "
        "instead of the server stopping with an error.", ("ValueError", "aborted"))
    reset_ratio_only_when_idle: bool = _behaviour(
        "new_token_ratio reset", "managers/scheduler.py: Scheduler.on_idle",
        "A step without a batch resets new_token_ratio (and checks memory) only when nothing "
        "waits or runs.", ("every step without a batch", "only when fully idle"))
    group_prefill_frees: bool = _behaviour(
        "frees after a prefill pass",
        "managers/scheduler_components/batch_result_processor.py: "
        "SchedulerBatchResultProcessor.process_batch_result_prefill",
        "The KV freed by requests that finish at their first token is returned in one "
        "free group (free_group_begin / free_group_end), not call by call.",
        ("one free call per request", "one free group per pass"))
    skip_finishing_decode_in_flight: bool = _behaviour(
        "overlap loop: requests finishing in flight",
        "managers/scheduler.py: Scheduler._reqs_finishing_inflight",
        "In the overlap loop, a request whose in-flight result reaches max_new_tokens sits out "
        "the next decode step (no slot allocated for it); if the step does not fit, the step is "
        "skipped instead of retracting, since that result frees their KV at the end of the "
        "step (0.5.9 decodes them once more and retracts).",
        ("decoded once more; a shortfall retracts", "left out; a shortfall skips the step"))
    # ----- the memory pools and the prefix cache: mem_cache/ ------------------------------
    req_pool_padding_row: bool = _behaviour(
        "request row 0", "mem_cache/memory_pool.py: ReqToTokenPool.__init__",
        "The page table has one more row than the request rows it hands out, row 0, which "
        "pads CUDA-graph batches and is never handed out.",
        ("a request row like the others: size rows in all",
         "a padding row, never handed out: size + 1 rows in all"))
    req_pool_reuses_last_freed: bool = _behaviour(
        "which free request row is taken", "mem_cache/memory_pool.py: ReqToTokenPool.alloc_rows",
        "Rows are taken from the back of the free list (free_slots[-n:]), so the row freed "
        "last is reused first; 0.5.9 takes them from the front.",
        ("the front of the free list (oldest first)", "the back of the free list (last freed first)"))
    free_order: str = _behaviour(
        "freed pages (page_size > 1)", "mem_cache/allocator/paged.py: free_segment",
        "How the cache returns a run of slots: 'sorted' (free, 0.5.9: each call's pages "
        "sorted) or 'row' (free_segment: pages in the row's order).",
        {"sorted": "sorted page ids (free)", "row": "row order (free_segment)"})
    evict_until_free: bool = _behaviour(
        "eviction when the free list is short", "mem_cache/allocator/base.py: evict_to_free_tokens",
        "Eviction stops as soon as the allocator has the slots asked for, instead of "
        "evicting the whole amount asked for.",
        ("evict the whole amount asked for (evict_from_tree_cache calls the tree's evict)",
         "evict until enough is free (evict_to_free_tokens asks the tree's evict_for_alloc for "
         "the shortfall)"))
    split_output_from_prompt: bool = _behaviour(
        "cached prompt + output", "mem_cache/unified_radix_cache.py: checkpoint_into_tree",
        "Inserting prompt + output splits the leaf at the prompt boundary, so the output can "
        "be evicted on its own; duplicates are freed node by node along the insert walk and "
        "the row is repointed along its path (0.5.9 matches the key again).",
        ("one node", "split at the prompt boundary"))
    # ----- server arguments: srt/arg_groups/ (0.5.9: srt/server_args.py) -----------------
    chunked_prefill_size_20_35_gib: int = _behaviour(
        "chunked_prefill_size, 20-35 GiB GPUs", "arg_groups/memory_hook.py: handle_gpu_memory_settings",
        "Tokens per prefill chunk on a card with 20-35 GiB (RTX 4090, L4).")
    cuda_graph_max_bs_20_35_gib: tuple[int, int] = _behaviour(
        "decode CUDA-graph max batch, 20-35 GiB GPUs",
        "arg_groups/memory_hook.py: handle_gpu_memory_settings",
        "The largest decode batch captured in a CUDA graph on a 20-35 GiB card, at tp < 4 and "
        "at tp >= 4.", parts=("tp < 4", "tp >= 4"))
    prefill_cuda_graph_reserve: bool = _behaviour(
        "memory kept for prefill CUDA graphs", "arg_groups/memory_hook.py: reserve_for_graph_mb",
        "The default mem_fraction_static keeps 8 MiB per captured prefill CUDA graph size "
        "(1.5 GiB for an MLA model) aside, on CUDA. 0.5.9 captures none by default; its "
        "--enable-piecewise-cuda-graph keeps 8 MiB per size for any model (server_args.py: "
        "ServerArgs._handle_gpu_memory_settings).",
        ("nothing by default (`--enable-piecewise-cuda-graph`: 8 MiB per size)",
         "8 MiB per size (MLA: 1.5 GiB)"))
    req_to_token_rows_are_cap: bool = _behaviour(
        "request rows handed out (size)",
        "mem_cache/kv_cache_configurator.py: KVCacheConfigurator.resolve_max_num_reqs",
        "The page table hands out max_running_requests request rows (0.5.9: as many as the "
        "pool and context length allow, unless `--max-running-requests` is set).",
        ("from the pool and context length unless `--max-running-requests` is set",
         "max_running_requests"))
    null_head_dim_sized: bool = _behaviour(
        "a config without head_dim (Mistral, Mixtral)",
        "configs/model_config.py: ModelConfig._derive_model_shapes",
        "A config whose head_dim transformers leaves None gets hidden_size // "
        "num_attention_heads for head_dim and v_head_dim. 0.5.9 (transformers 4.57.1 stores "
        "None for Mistral and Mixtral) takes v_head_dim before it mends head_dim, so "
        "ModelRunnerKVCacheMixin.get_cell_size_per_token fails with a TypeError at start-up.",
        ("start-up fails (TypeError: int + None in get_cell_size_per_token)",
         "sized with head_dim = hidden_size // num_attention_heads"))
    context_len_skips_layered_rope: bool = _behaviour(
        "context length of a model with a rope per layer type (Gemma 3)",
        "utils/hf_transformers/common.py: get_context_length",
        "get_context_length multiplies max_position_embeddings by rope_scaling's factor; "
        "for Gemma 3 the release's transformers (5.x; 0.5.9 pins 4.57.1, which keeps the "
        "config's one rope_scaling dict) keeps the rope per layer type, so no factor is found.",
        ("max_position_embeddings x the rope scaling factor (rope_scaling's factor)",
         "max_position_embeddings (no rope scaling factor found)"))
    req_rows_from_final_pool: bool = _behaviour(
        "request rows from which pool size",
        "mem_cache/kv_cache_configurator.py: KVCacheConfigurator.resolve_max_num_reqs",
        "The default request rows, min(max(int(tokens / context_len * 512), 2048), 4096), "
        "count the pool's tokens after `--max-total-tokens` and page rounding (0.5.9's "
        "ModelRunnerKVCacheMixin.init_memory_pool counts the profiled tokens, before both).",
        ("from the profiled pool, before `--max-total-tokens` and page rounding",
         "from the final pool, after `--max-total-tokens` and page rounding"))
    cap_running_at_half_pool: bool = _behaviour(
        "`--max-running-requests`",
        "mem_cache/kv_cache_configurator.py: KVCacheConfigurator.resolve_max_num_reqs",
        "A `--max-running-requests` above half the pool's tokens is lowered to that.",
        ("taken as given", "at most max_total_num_tokens // 2"))
    page_pool_before_cap: bool = _behaviour(
        "profiled pool and `--max-total-tokens`", "mem_cache/kv_cache_configurator.py: KVCacheConfigurator",
        "The profiled token count is rounded down to whole pages before `--max-total-tokens` "
        "caps it (and the warning names the paged count).",
        ("capped, then paged", "paged, capped, paged again"))
    sized_by_pool_configurator: bool = _behaviour(
        "where the pools are sized", "model_executor/pool_configurator.py: create_memory_pool_configurator",
        "KVCacheConfigurator picks a pool configurator class (DefaultPoolConfigurator, or a "
        "hybrid's own) that sizes the pools; 0.5.9 has no such class: ModelRunner sizes them "
        "in ModelRunnerKVCacheMixin.init_memory_pool.",
        ("ModelRunner.init_memory_pool (no configurator)", "a pool configurator class"))
    multimodal_kv_reservation: bool = _behaviour(
        "KV budget of a multimodal model",
        "mem_cache/kv_cache_configurator.py: KVCacheConfigurator._profile_available_bytes",
        "A multimodal model (Gemma 3 with `--enable-multimodal`) gives SGLANG_VLM_CACHE_SIZE_MB "
        "(100 MiB) of the KV budget to its feature-transport pools and embedding cache, and "
        "says so; 0.5.9's profile_max_num_token takes nothing out.",
        ("the whole budget to KV", "100 MiB kept for image features, with a log line"))
    swa_sized_by_configurator: bool = _behaviour(
        "sliding-window hybrid: full and SWA pools",
        "model_executor/pool_configurator.py: HybridSWAPoolConfigurator",
        "The budget is split at full + ratio x SWA bytes per token "
        "(HybridSWAPoolConfigurator; SWARequestCapPoolConfigurator when `--max-running-requests` "
        "bounds the window's needs), refusing an SWA pool that cannot hold one window. 0.5.9 "
        "(ModelRunnerKVCacheMixin.set_num_tokens_hybrid_swa) profiles every layer at full "
        "length, caps and pages that count, then redistributes its bytes so that the SWA "
        "pool holds ratio x the full pool's tokens, with no request cap and no window check.",
        ("every layer profiled at full length, then redistributed (set_num_tokens_hybrid_swa)",
         "the budget split by a pool configurator"))
    swa_pool_lines_labelled: bool = _behaviour(
        "sliding-window hybrid: allocation lines", "mem_cache/memory_pool.py: _finalize_allocation_log",
        "The full and SWA pools' allocation lines say which pool they are ('Full KV Cache is "
        "allocated', 'SWA KV Cache is allocated'), the full pool's first; 0.5.9 builds the "
        "SWA pool first and both lines read 'KV Cache is allocated'.",
        ("unlabelled, the SWA pool's line first", "'Full ...' then 'SWA ...'"))
    mamba_share_keeps_padding_slot: bool = _behaviour(
        "linear-attention hybrid: state slots",
        "mem_cache/kv_cache_configurator.py: KVCacheConfigurator._handle_max_mamba_cache",
        "The state slots are int((share - slot) // slot), so that the share also holds the "
        "pool's padding slot, and slots + 1 leave the KV budget; no slot is an error. 0.5.9 "
        "(ModelRunnerKVCacheMixin.handle_max_mamba_cache): int(share // slot), slots leave "
        "the budget, and no slot is not checked there.",
        ("int(share // slot) slots, the padding slot left out of the sum",
         "int((share - slot) // slot) slots, slots + 1 taken from the KV budget"))
    mamba_cap_warns: bool = _behaviour(
        "linear-attention hybrid: the cap on requests",
        "mem_cache/kv_cache_configurator.py: KVCacheConfigurator.resolve_max_num_reqs",
        "A cap on running requests by the state slots (slots // 5 with the radix cache by "
        "default, // 1 without) is logged as a warning, and no request at all has its own error; 0.5.9 caps "
        "the request rows silently, and TpModelWorker asserts 'max_running_request is zero'.",
        ("silent (an assertion when no request fits)", "a warning saying what to raise"))
    mamba_auto_extra_buffer: bool = _behaviour(
        "linear-attention hybrid: state slots per request with the radix cache",
        "arg_groups/overrides.py: _mamba_radix_cache_resolution",
        "The radix-cache strategy of a linear-attention hybrid (--mamba-radix-cache-strategy; "
        "0.5.9 --mamba-scheduler-strategy) defaults to auto, which 0.5.23 resolves to "
        "extra_buffer for models that support it (Qwen3-Next, on CUDA) when the overlap loop is "
        "on or pages are longer than one token: each running request also holds track slots "
        "the state is copied into at checkpoints, two that take turns with the overlap loop "
        "(one without; get_mamba_tracking_slots), so the cap on running requests counts "
        "3 + 2 = 5 state slots per request (_calculate_mamba_ratio); else no_buffer (3, and the "
        "overlap loop turned off). 0.5.9 (ServerArgs.__post_init__) resolves auto to no_buffer: 3.",
        ("the default strategy (auto) is no_buffer: 3 state slots per running request",
         "the default strategy (auto) is extra_buffer: 3 + 2 track slots = 5 per running request"))
    mamba_slots_taken_ahead: bool = _behaviour(
        "linear-attention hybrid: state slots in a prefill pass",
        "managers/scheduler.py: Scheduler._get_new_batch_prefill_raw",
        "Each prefill pass takes one state slot ahead per waiting request from the front of "
        "the free list (when that many are free) and appends the unused ones to its back "
        "when the pass ends (MambaSlotAllocator.alloc_group_begin/end), radix cache on or "
        "off; without the radix cache none is used, so the pass rotates the free list, which "
        "decides the slot each admitted request gets. "
        "0.5.9 has no such group: the free list is only changed by allocations and frees.",
        ("free list changed only by allocations and frees",
         "each pass rotates the first len(waiting_queue) free slots to the back"))
    retract_log_counts_mamba_slots: bool = _behaviour(
        "linear-attention hybrid: the retraction line",
        "managers/scheduler.py: Scheduler.update_running_batch",
        "The 'Retract requests' warning of a model with state slots adds the slots the "
        "retraction gave back ('#mamba_num_gained: N', after '#new_tokens_gained'); 0.5.9's "
        "line counts the KV tokens only.",
        ("KV tokens only", "'#mamba_num_gained' added"))
    kv_dtype_in_allocation_log: bool = _behaviour(
        "start-up log dtype", "mem_cache/memory_pool.py: _finalize_allocation_log",
        "The 'KV Cache is allocated' line names the KV dtype; the 'Load weight end' line no "
        "longer names the weights' dtype.", ("on the load line", "on the allocation line"))
    weights_leave_no_memory_error: bool = _behaviour(
        "weights fill the static budget", "mem_cache/kv_cache_configurator.py: "
        "KVCacheConfigurator._profile_available_bytes",
        "When the weights take the whole static budget, start-up fails with 'Loaded weights "
        "leave no GPU memory' and the smallest viable fraction, not 'Not enough memory'.",
        ("'Not enough memory'", "'Loaded weights leave no GPU memory'"))
    # ----- attention backends: srt/arg_groups/overrides.py -------------------------------
    attention_backends: tuple[str, ...] = _behaviour(
        "attention backends offered", "layers/attention/attention_registry.py",
        "The `--attention-backend` values the release offers (of those the book covers).")
    forced_page_sizes: tuple[tuple[str, tuple[int, ...], int] | tuple[str, tuple[int, ...], int, str],
                             ...] = _behaviour(
        "page sizes a backend forces", "arg_groups/overrides.py: _mla_backend_page_constraints, "
        "_fa4_page_constraint",
        "(backend, page sizes it accepts, what any other becomes[, when the rule holds, in "
        "words]) for each backend that forces a page size; without the fourth part the rule "
        "holds whenever the backend runs.")
    fa4_for_asymmetric_kv: bool = _behaviour(
        "default backend, sm_100, K and V of different widths",
        "arg_groups/model_override_base.py: get_default_attn_backend",
        "On sm_100, a model whose K and V rows differ in width gets fa4.", ("trtllm_mha", "fa4"))
    flashinfer_avoids_attention_sinks: bool = _behaviour(
        "default backend, a model with attention sinks and no backend rule of its own",
        "arg_groups/model_override_base.py: get_default_attn_backend",
        "Below sm_90, a model with attention sinks that has no backend rule of its own (e.g. "
        "MiMo-V2-Flash with its sink flags set) gets triton, not flashinfer. gpt-oss is not "
        "such a model: both releases give it its own rule (gpt_oss_aiter_on_rocm).",
        ("flashinfer", "triton"))
    gpt_oss_aiter_on_rocm: bool = _behaviour(
        "gpt-oss's default backend on AMD GPUs",
        "arg_groups/model_overrides/gpt_oss.py: _gpt_oss_overrides",
        "gpt-oss has its own backend rule in both releases (fa3 on sm_90, trtllm_mha on sm_100, "
        "triton on the other NVIDIA GPUs, sm_120 included); on AMD GPUs 0.5.23 gives it aiter, "
        "0.5.9 triton (0.5.9 server_args.py _handle_model_specific_adjustments).",
        ("triton", "aiter"))
    dsa_attention_backend: tuple[str, str] = _behaviour(
        "DeepSeek V3.2 (DSA) backends, sm_90", "arg_groups/overrides.py: _dsa_split_backend_resolution",
        "The attention backend of DeepSeek V3.2's sparse attention (DSA; SGLang 0.5.9 calls it "
        "NSA), which names its start-up line, and the prefill backend of an fp8_e4m3 KV cache on "
        "sm_90.", parts=("attention", "fp8_e4m3 prefill"))
    dsa_fp8_latent_profiled_as_stored: bool = _behaviour(
        "DeepSeek V3.2 (DSA) fp8_e4m3 bytes per token",
        "model_executor/pool_configurator.py: _compute_cell_size",
        "An fp8_e4m3 DeepSeek V3.2 latent is profiled as its pool stores it (the fp8 latent, a "
        "float32 scale per 128 values, the rope part in bf16), not as one fp8 byte per number. "
        "configs/dsa_config.py's latent_bytes_per_token computes the stored bytes.",
        ("kv_lora_rank + qk_rope_head_dim fp8 bytes per layer, fewer than the pool stores",
         "what the pool stores per layer: the fp8 latent, its float32 scales, the rope part in bf16"))

    def __repr__(self) -> str:
        return f"<SGLang {self.name}>"

    def __post_init__(self) -> None:
        if self.free_order not in FREE_ORDERS:
            raise bad_value("free_order", self.free_order, "one of " + ", ".join(FREE_ORDERS))
