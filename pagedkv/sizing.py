"""SGLang's KV-pool arithmetic: how many tokens fit, how many requests may run.

The pool is what is left of the GPU after the weights and a reserve for activations and
CUDA graphs (profiled in :mod:`pagedkv.kv_cache_configurator`, with the request rows).
SGLang measures free memory twice, before (``pre``) and after (``post``) loading the weights,
and keeps ``mem_fraction_static`` (``f``) of ``pre`` for weights plus KV::

    rest = post - pre * (1 - f)   ==   f * pre - (pre - post)
    max_total_num_tokens = floor(rest / cell_size)       then capped, then page-rounded

Follows SGLang 0.5.23 ``python/sglang/srt/mem_cache/kv_cache_configurator.py``
(``KVCacheConfigurator._profile_available_bytes``, ``resolve_max_num_reqs``) and
``srt/model_executor/pool_configurator.py`` (``calculate_pool_sizes``); in 0.5.9
``srt/model_executor/model_runner_kv_cache_mixin.py`` (``profile_max_num_token``,
``init_memory_pool``). The default ``mem_fraction_static`` is in :mod:`pagedkv.server_args`;
what SGLang checks and warns about beside the arithmetic (a longer context, ignored flags,
the fraction's default) in :mod:`pagedkv.sizing_checks`. All memory is bytes.
"""

from __future__ import annotations

from dataclasses import replace

from pagedkv.configs.dsa_config import indexer_bytes_per_token
from pagedkv.configs.model_config import ModelSpec
from pagedkv.configs.model_family import text_config
from pagedkv.configs.model_hybrid import window_from_attention_chunk
from pagedkv.configs.model_presets import load_model
from pagedkv.dsa_indexer import dsa_pool_bytes, dsa_server_args, profiled_cell_size
from pagedkv.errors import (
    ConfigError,
    NotEnoughMemoryError,
    bad_value,
    check_fraction,
    check_positive_int,
)
from pagedkv.gpus import GPUSpec, get_gpu
from pagedkv.hybrid_pools import (
    check_hybrid_flags,
    check_mamba_track_interval,
    mamba_tracking_slots,
    redistribute_swa_tokens,
    size_swa_pools,
    swa_request_cap,
)
from pagedkv.kv_cache_configurator import (
    not_enough_memory,
    profile_max_num_token,
    profile_tokens,
    req_to_token_pool_size,
    resolve_max_num_reqs,
)
from pagedkv.pool_plan import KVPoolPlan, batch_cap, max_req_input_len
from pagedkv.releases import DEFAULT_SGLANG_VERSION, Release, as_release
from pagedkv.server_args import (
    default_mem_fraction_static,
    gpu_memory_defaults,
    prefill_cuda_graph_sizes,
    static_reserve_mib,
)
from pagedkv.sizing_checks import (
    GPUS_BELOW_SM80,
    WHOLE_CARD_NOTE,
    capacity_warnings,
    check_context_len,
    inapplicable_flag_warnings,
    resolve_mem_fraction_static,
)
from pagedkv.units import GiB, MiB, fmt_gib, kv_dtype_bytes


def plan_pool(
    model: ModelSpec | str,
    *,
    gpu: GPUSpec | str | None = None,
    pre_free_bytes: int | None = None,
    post_free_bytes: int | None = None,
    mem_fraction_static: float | None = None,
    tp: int = 1,
    page_size: int = 1,
    kv_cache_dtype: str = "bf16",
    context_len: int | None = None,
    max_total_tokens: int | None = None,
    max_running_requests: int | None = None,
    weights_bytes: int | None = None,
    sglang_version: str | Release = DEFAULT_SGLANG_VERSION,
    chunked_prefill_size: int | None = None,
    disable_radix_cache: bool = False,
    swa_full_tokens_ratio: float | None = None,
    mamba_full_memory_ratio: float | None = None,
    max_mamba_cache_size: int | None = None,
    enable_multimodal: bool = False,
    disable_overlap_schedule: bool = False,
) -> KVPoolPlan:
    """Size the KV pool as SGLang does at start-up.

    Either give measured ``pre_free_bytes`` and ``post_free_bytes`` (SGLang's "avail mem"
    before and after loading weights), or a ``gpu`` preset: then ``pre`` is the card's total
    memory and ``post = pre - weights``, which turns the formula into the card arithmetic
    ``pool = f * HBM - weights`` (a real server sees ~0.5-2 GiB less, taken by the CUDA
    context and communication buffers).

    Args:
        model: a :class:`ModelSpec`, a preset name or a ``config.json`` path.
        gpu: a GPU preset (or its name); required unless both free-memory readings are given.
        mem_fraction_static: ``f`` in (0, 1]; default: SGLang's for ``gpu`` and this model
            in ``sglang_version`` (:func:`default_mem_fraction_static`).
        tp: attention tensor-parallel size (memory is per GPU).
        page_size: tokens per page, >= 1 (DSA: :func:`pagedkv.dsa_indexer.dsa_page_size`).
        kv_cache_dtype: ``bf16``, ``fp16``, ``fp32``, ``fp8_e4m3`` or ``fp8_e5m2``.
        context_len: default SGLang's for this model under ``sglang_version``
            (:meth:`ModelSpec.sglang_context_len`: ``max_position_embeddings``, times the
            rope factor where SGLang applies one). A longer one is refused unless
            ``SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN`` is set, as SGLang refuses it
            (:func:`check_context_len`); then SGLang's warning is in the plan's ``notes``.
        max_total_tokens: SGLang's ``--max-total-tokens`` cap. A cap above the profiled
            pool leaves the pool as profiled, and the plan's ``warnings`` (and its log lines)
            carry SGLang's warning saying so. "Profiled" is the pool already rounded down to
            whole pages in 0.5.23 (``calculate_pool_sizes`` rounds before
            ``_apply_token_constraints``), the unrounded count in 0.5.9 (``init_memory_pool``).
        weights_bytes: override the weight size per GPU (needed for quantized models).
        sglang_version: a release name (default 0.5.23) or a :class:`Release`: whose
            default ``f``, ``max_running_requests``, start-up error and log lines to follow.
            Hybrid models too: 0.5.9 redistributes a sliding-window hybrid's pool
            after profiling it (:func:`pagedkv.hybrid_pools.redistribute_swa_tokens`).
        chunked_prefill_size: SGLang's ``--chunked-prefill-size``: -1 (prefill not
            chunked) or >= 1 (default: the GPU preset's). As in SGLang, a given value
            replaces the card's in the default ``mem_fraction_static``'s reserve and in the
            log line (:func:`pagedkv.server_args.static_reserve_mib`). With ``max_running_requests`` and
            ``disable_radix_cache`` it makes SGLang size a sliding-window pool from the
            requests' needs (``SWARequestCapPoolConfigurator``).
        disable_radix_cache: ``--disable-radix-cache`` (sliding-window request cap; one
            state slot per request for linear-attention hybrids, instead of 3 plus the
            ``extra_buffer`` strategy's track slots: :func:`pagedkv.hybrid_pools.mamba_tracking_slots`).
        swa_full_tokens_ratio: ``--swa-full-tokens-ratio`` in (0, 1], default 0.8: SWA
            tokens per full token.
        mamba_full_memory_ratio: ``--mamba-full-memory-ratio`` > 0, default 0.9: state
            bytes per KV byte of a linear-attention hybrid.
        max_mamba_cache_size: ``--max-mamba-cache-size``: state slots, instead of the share.
        disable_overlap_schedule: ``--disable-overlap-schedule``: with the radix cache on, a
            linear-attention hybrid's requests then hold one track slot (two with the
            overlap loop), none with pages of one token (0.5.23's strategy resolution).
        enable_multimodal: ``--enable-multimodal``: a multimodal model (Gemma 3, which SGLang
            0.5.23 serves text-only by default) keeps its vision path: 100 MiB of the KV
            budget go to the feature cache (0.5.23; ``Release.multimodal_kv_reservation``)
            and the default ``f`` shrinks with the encoder.

    The plan's ``notes`` carry what a capacity planner should read beside the numbers:
    SGLang's warning for a longer context, flags this model ignores
    (:func:`inapplicable_flag_warnings`), the whole card taken as free when no readings are
    given, and a pool that holds no full-context request (:func:`capacity_warnings`).

    Raises:
        ConfigError: any parameter outside its range (named in the message; a
            ``chunked_prefill_size`` neither -1 nor >= 1, a ``context_len`` above the model's
            without SGLang's environment variable, no ``mem_fraction_static`` and no ``gpu``), a
            Mistral/Mixtral config without ``head_dim`` under 0.5.9 (its start-up fails), or
            a linear-attention hybrid with the radix cache on and pages that do not divide
            ``mamba_track_interval`` (256) under 0.5.23 (SGLang's ``extra_buffer`` assertion).
        NotEnoughMemoryError: the weights leave no room for a pool, or the room left is
            less than one page (SGLang's error, with the cause added:
            :func:`pagedkv.kv_cache_configurator.not_enough_memory`; for a hybrid also its
            SWA-pool and state-slot errors).
    """
    if not isinstance(model, ModelSpec):
        model = load_model(model)
    if isinstance(gpu, str):
        gpu = get_gpu(gpu)
    release = as_release(sglang_version)
    check_positive_int("page_size", page_size)
    check_positive_int("tp", tp)
    elem = kv_dtype_bytes(kv_cache_dtype)
    server_lines: list[str] = []
    if model.index_head_dim:  # DeepSeek V3.2: SGLang sets its page size and backends
        page_size, server_lines = dsa_server_args(page_size, kv_cache_dtype, gpu, release)
    if weights_bytes is not None and weights_bytes < 0:
        raise bad_value("weights_bytes", weights_bytes, "a byte count >= 0")
    whole_card = pre_free_bytes is None  # the card's total stands in for a reading
    if pre_free_bytes is None or post_free_bytes is None:
        if gpu is None:
            raise bad_value("gpu", None, "a GPU preset, or both pre_free_bytes and post_free_bytes")
        if weights_bytes is None:  # measured readings need no weight size: pre - post is it
            weights_bytes = model.weight_bytes(tp)
        pre_free_bytes = gpu.memory_bytes if pre_free_bytes is None else pre_free_bytes
        post_free_bytes = pre_free_bytes - weights_bytes
    else:
        weights_bytes = pre_free_bytes - post_free_bytes
    if pre_free_bytes <= 0:
        raise bad_value("pre_free_bytes", pre_free_bytes, "a positive byte count")
    if post_free_bytes > pre_free_bytes:
        raise bad_value("post_free_bytes", post_free_bytes,
                        f"at most pre_free_bytes={pre_free_bytes} (loading weights frees nothing)")
    if post_free_bytes <= 0:
        raise NotEnoughMemoryError(
            f"Not enough memory: weights take {fmt_gib(weights_bytes)} of "
            f"{fmt_gib(pre_free_bytes)} free; use a larger GPU, more tensor parallelism "
            "or a quantized checkpoint"
        )
    mem_fraction_static, card_f = resolve_mem_fraction_static(
        model, gpu, mem_fraction_static, tp=tp, chunked_prefill_size=chunked_prefill_size,
        sglang_version=sglang_version, enable_multimodal=enable_multimodal)
    check_fraction("mem_fraction_static", mem_fraction_static)
    if model.head_dim_left_none and not release.null_head_dim_sized:
        raise ConfigError(
            f"model {model.name!r}: its config has no head_dim, and SGLang {release.name} "
            "cannot size it: its ModelConfig leaves v_head_dim None for "
            f"{model.model_type} (transformers stores head_dim=None), and start-up fails in "
            "get_cell_size_per_token with TypeError (int + None); valid: add \"head_dim\": "
            f"{model.head_dim} to config.json, or sglang_version=0.5.23")
    derived_context_len = model.sglang_context_len(release)
    context_len = derived_context_len if context_len is None else context_len
    notes = check_context_len(context_len, derived_context_len)
    notes += inapplicable_flag_warnings(
        model, swa_full_tokens_ratio=swa_full_tokens_ratio,
        mamba_full_memory_ratio=mamba_full_memory_ratio,
        max_mamba_cache_size=max_mamba_cache_size, enable_multimodal=enable_multimodal)
    if whole_card:
        assert gpu is not None  # checked above: no readings without a GPU preset
        notes += (WHOLE_CARD_NOTE.format(label=gpu.label, total=fmt_gib(gpu.memory_bytes)),)

    if chunked_prefill_size is None and gpu is not None:  # the card's default, as SGLang's
        chunked_prefill_size = gpu_memory_defaults(gpu.memory_mib, tp, sglang_version)[0]
    hybrid = check_hybrid_flags(swa_full_tokens_ratio, mamba_full_memory_ratio,
                                max_mamba_cache_size, max_running_requests)
    tracking_slots = 0 if model.family != "linear" else mamba_tracking_slots(
        disable_radix_cache=disable_radix_cache, page_size=page_size,
        disable_overlap_schedule=disable_overlap_schedule,
        auto_extra_buffer=release.mamba_auto_extra_buffer)
    check_mamba_track_interval(page_size, tracking_slots)
    cell = profiled_cell_size(model, kv_cache_dtype, tp, release)
    vision = model.is_multimodal and enable_multimodal
    profile = profile_tokens(
        model, pre_free_bytes, post_free_bytes, mem_fraction_static, cell, release,
        vision=vision, tp=tp, mamba_ratio=hybrid["mamba_ratio"],
        max_mamba_cache_size=max_mamba_cache_size, max_running_requests=max_running_requests,
        disable_radix_cache=disable_radix_cache)
    tokens, available, lines = profile.tokens, profile.available, list(profile.lines)
    weights_fill_budget = profile.weights_fill_budget
    extra: dict[str, object] = {"mamba_slots": profile.mamba_slots,
                                "conv_state_bytes": profile.conv_state_bytes,
                                "ssm_state_bytes": profile.ssm_state_bytes}
    exact = model.is_hybrid or vision
    by_configurator = model.family == "swa" and release.swa_sized_by_configurator
    card_f = card_f if card_f is not None and card_f > 0 else None  # no default to compare
    if (weights_fill_budget and exact) or (tokens < page_size and not by_configurator):
        raise not_enough_memory(pre_free_bytes, post_free_bytes, mem_fraction_static,
                                 weights_fill_budget and release.weights_leave_no_memory_error,
                                 room_tokens=0 if weights_fill_budget else tokens,
                                 page_size=page_size, default_f=card_f,
                                 chunked_prefill_size=chunked_prefill_size)
    warnings: tuple[str, ...] = ()
    profiled = tokens  # before caps and pages: what 0.5.9 sizes the request rows from
    if by_configurator:
        chunked = chunked_prefill_size is not None and chunked_prefill_size > 0
        cap = (swa_request_cap(page_size=page_size, window=model.sliding_window,
                               max_running_requests=max_running_requests,
                               chunked_prefill_size=chunked_prefill_size)
               if max_running_requests is not None and disable_radix_cache and chunked else None)
        if max_running_requests is not None:
            check_positive_int("max_running_requests", max_running_requests)
        assert available is not None  # a sliding-window model is profiled in GiB, as a hybrid
        swa = size_swa_pools(available, full_cell=model.full_cell_size(kv_cache_dtype, tp),
                             swa_cell=model.swa_cell_size(kv_cache_dtype, tp),
                             page_size=page_size, ratio=hybrid["swa_ratio"],
                             window=model.sliding_window, max_total_tokens=max_total_tokens,
                             request_cap=cap)
        tokens, cell = swa.full_tokens, model.full_cell_size(kv_cache_dtype, tp)
        lines += swa.lines
        warnings = tuple(line for line in swa.lines if line.startswith("max_total_tokens="))
        extra.update(configurator=swa.configurator, swa_max_total_num_tokens=swa.swa_tokens,
                     swa_cell_size=model.swa_cell_size(kv_cache_dtype, tp),
                     sliding_window=model.sliding_window)
    else:
        if release.page_pool_before_cap:  # 0.5.23's configurator pages the pool before the cap
            tokens = tokens // page_size * page_size
        if max_total_tokens is not None:
            check_positive_int("max_total_tokens", max_total_tokens)
            if max_total_tokens > tokens:  # SGLang warns and keeps the profiled pool
                warnings = (f"max_total_tokens={max_total_tokens} is larger than the profiled "
                            f"value {tokens}. Use the profiled value instead.",)
            tokens = min(tokens, max_total_tokens)
        room = tokens  # the capped pool before page rounding: less than a page fails
        tokens = tokens // page_size * page_size
        lines += warnings
        if tokens <= 0:
            raise not_enough_memory(pre_free_bytes, post_free_bytes, mem_fraction_static, False,
                                     room_tokens=room, page_size=page_size, default_f=card_f,
                                     chunked_prefill_size=chunked_prefill_size)
        if model.family == "swa":  # 0.5.9: the paged pool redistributed (no configurator)
            full_cell = model.full_cell_size(kv_cache_dtype, tp)
            swa_cell = model.swa_cell_size(kv_cache_dtype, tp)
            swa = redistribute_swa_tokens(
                tokens, full_per_token=full_cell // model.num_full_attention_layers,
                full_layers=model.num_full_attention_layers,
                swa_per_token=swa_cell // model.num_swa_layers, swa_layers=model.num_swa_layers,
                page_size=page_size, ratio=hybrid["swa_ratio"])
            tokens, cell = swa.full_tokens, full_cell
            lines += swa.lines
            extra.update(swa_max_total_num_tokens=swa.swa_tokens, swa_cell_size=swa_cell,
                         sliding_window=model.sliding_window)
    max_running_requests, slots, row_lines = resolve_max_num_reqs(
        model, tokens, profiled, context_len, max_running_requests, release,
        state_slots=profile.mamba_slots,
        disable_radix_cache=disable_radix_cache, tracking_slots=tracking_slots)
    lines += row_lines
    rows = tokens + page_size  # each per-layer buffer has one padding page
    layers = model.num_full_attention_layers
    if model.index_head_dim:  # the latents and the index keys, one "KV size" in the log
        k_size, v_size = dsa_pool_bytes(model, tokens, page_size, kv_cache_dtype), 0
        extra.update(server_args_lines=tuple(server_lines),
                     indexer_cell_size=layers * indexer_bytes_per_token(model.index_head_dim))
    elif model.is_mla:
        k_size = rows * (model.kv_lora_rank + model.qk_rope_head_dim) * layers * elem
        v_size = 0
    else:
        heads = model.kv_heads_per_rank(tp)
        k_size = rows * heads * model.head_dim * layers * elem
        v_size = rows * heads * model.v_head_dim * layers * elem
    if not release.sized_by_pool_configurator:  # 0.5.9: ModelRunner sizes, no class
        extra["configurator"] = ""
    plan = KVPoolPlan(
        model=model.name, mem_fraction_static=mem_fraction_static, tp=tp, page_size=page_size,
        kv_cache_dtype=kv_cache_dtype, context_len=context_len, pre_free_bytes=pre_free_bytes,
        post_free_bytes=post_free_bytes, weights_bytes=weights_bytes, cell_size=cell,
        max_total_num_tokens=tokens, req_to_token_pool_size=slots,
        max_running_requests=max_running_requests, k_size_bytes=k_size, v_size_bytes=v_size,
        is_mla=model.is_mla, sglang_version=release.name,
        kv_dtype_in_allocation_log=release.kv_dtype_in_allocation_log,
        swa_pool_lines_labelled=release.swa_pool_lines_labelled, architecture=model.architecture,
        chunked_prefill_size=chunked_prefill_size, warnings=warnings, sizing_lines=tuple(lines),
        attention_chunk_window=window_from_attention_chunk(
            text_config(model.config), model.architecture, model.family == "swa"),
        model_dtype=("torch.float16" if gpu is not None and gpu.name in GPUS_BELOW_SM80
                     else "torch.bfloat16"),
        **extra,  # type: ignore[arg-type]
    )
    return replace(plan, notes=notes + capacity_warnings(plan))


__all__ = [
    "GiB",
    "KVPoolPlan",
    "MiB",
    "batch_cap",
    "default_mem_fraction_static",
    "gpu_memory_defaults",
    "max_req_input_len",
    "plan_pool",
    "prefill_cuda_graph_sizes",
    "profile_max_num_token",
    "req_to_token_pool_size",
    "static_reserve_mib",
]
