"""SGLang 0.5.23's own KV-pool sizing for a ``config.json`` dict, run on this CPU.

What runs is SGLang's: ``ModelConfig`` parses the config (written to a temporary folder, so
transformers' config classes fill their defaults as at server start), a real ``ServerArgs``
is published through the runtime context, ``KVCacheConfigurator._resolve_memory_pool_config``
profiles the budget, picks the pool configurator (``create_memory_pool_configurator``) and
resolves ``max_running_requests``, and the pools are then built on torch's ``meta`` device so
that their classes print their own "KV Cache is allocated" line without touching memory.

Hybrid models run the same way: SGLang picks ``HybridSWAPoolConfigurator`` or
``SWARequestCapPoolConfigurator`` for a sliding-window hybrid, and takes the state slots of a
linear-attention hybrid out of the budget (``_handle_max_mamba_cache``) before its default
configurator sizes the full-attention KV; the pools built on the meta device (``SWAKVPool``,
``MambaPool`` + ``HybridLinearKVPool``) print their own lines. The sliding window is what
ModelRunner would pass: the model class's ``get_attention_sliding_window_size`` (gpt-oss:
``sliding_window - 1``), given by the caller (importing the model class needs GPU kernels).

Replaced, as nothing on a CPU can answer them: the free-memory reading after the weights
load (``get_available_gpu_memory`` returns the caller's ``post`` GiB, so the full garbage
collection SGLang runs before reading it, which frees nothing that reading could see and
takes about a second in a process holding SGLang's modules, is skipped), the CUDA-graph settings
(an inert ``cuda_graph_config``; they matter only for prefill/decode disaggregation), and the
world group (no collective runs with one rank). 0.5.23 only: 0.5.9 sizes in
``model_runner_kv_cache_mixin.py`` with a different layout (:mod:`pools_sglang_0509`).
"""

from __future__ import annotations

import types
from typing import Any

import sgl_boot

sgl_boot.load()

import torch  # noqa: E402
from sgl_model_config import ModelConfigs, captured_logs  # noqa: E402
from sglang.srt.arg_groups import overrides as overrides_mod  # noqa: E402
from sglang.srt.arg_groups.model_override_base import resolved_view  # noqa: E402
from sglang.srt.configs.model_config import AttentionArch, ModelConfig  # noqa: E402
from sglang.srt.mem_cache import kv_cache_configurator as kvc_mod  # noqa: E402
from sglang.srt.mem_cache import kv_cache_dtype as kvd_mod  # noqa: E402
from sglang.srt.model_executor import pool_configurator as pc_mod  # noqa: E402
from sglang.srt.model_executor.model_runner_components.layer_setup import (  # noqa: E402
    resolve_layer_indices,
)
from sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state import (  # noqa: E402
    SpecAuxHiddenStateConfig,
)
from sglang.srt.runtime_context import (  # noqa: E402
    _WIDTH_AND_GROUP,
    get_context,
    get_parallel,
    get_schedule,
)
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm  # noqa: E402

#: The loggers whose INFO lines the pools print while they are built.
LOGGERS = ("sglang.srt.mem_cache.memory_pool", "sglang.srt.mem_cache.kv_cache_configurator",
           "sglang.srt.model_executor.pool_configurator", "sglang.srt.mem_cache.swa_memory_pool",
           "")  # "": warnings SGLang logs on root


class _OnePipelineStage:
    world_size = 1
    rank_in_group = 0


#: SGLang's ``ModelConfig`` for a config dict (parsed once per distinct config and flags).
model_config = ModelConfigs("pagedkv-pools-")


def pool_sizes(config: dict[str, Any], *, pre_gib: float, post_gib: float,
               mem_fraction_static: float, tp: int = 1, page_size: int = 1,
               kv_cache_dtype: str = "auto", sliding_window_size: int | None = None,
               **server_args: Any) -> dict[str, Any]:
    """What SGLang 0.5.23 sizes on one attention-TP rank: the configurator it picks, the
    bytes per token, the token counts (full and SWA), the state slots, the request count and
    the log lines (the configurator's, its warnings and the pools' own)."""
    mc = model_config(config, bool(server_args.get("disable_hybrid_swa_memory")),
                      server_args.pop("enable_multimodal", None))
    fields = dict(page_size=page_size, tp_size=tp, mem_fraction_static=mem_fraction_static,
                  kv_cache_dtype=kv_cache_dtype, device="cpu", **server_args)
    override = get_context().override_server_args(**fields)
    sa = override.install()
    declared = _mamba_strategy(sa, mc)
    if declared:  # published again with what SGLang's resolution declares
        override.restore()
        override = get_context().override_server_args(**{**fields, **declared})
        sa = override.install()
    graphs = types.SimpleNamespace(
        prefill=types.SimpleNamespace(full_prefill_max_req=None, backend=None))
    get_context().override("pagedkv-reference", cuda_graph_config=graphs)
    try:
        return _run(mc, sa, pre_gib, post_gib, page_size, kv_cache_dtype, sliding_window_size)
    finally:
        override.restore()


def _mamba_strategy(sa: Any, mc: ModelConfig) -> dict[str, Any]:
    """What SGLang's own ``_mamba_radix_cache_resolution`` declares for these arguments
    (``--mamba-radix-cache-strategy auto`` resolved, as a server's start-up does and a
    published override does not): ``extra_buffer`` for a linear-attention hybrid with the
    radix cache on and the overlap loop on or pages over one token; else ``no_buffer``,
    with the overlap loop off; nothing for other models or with the radix cache off. The
    model config is handed to it as a fixture would be (``_model_config``: no model folder)."""
    sa._model_config = mc
    try:
        return dict(overrides_mod._mamba_radix_cache_resolution(resolved_view(sa)))
    finally:
        del sa._model_config


def extra_buffer_start_check(config: dict[str, Any], *, page_size: int,
                             **server_args: Any) -> str | None:
    """SGLang 0.5.23's start-up check of the mamba radix cache's strategy for these arguments:
    ``auto`` resolved by ``_mamba_radix_cache_resolution``, then, for ``extra_buffer``, its own
    ``mamba_hook.validate_mamba_extra_buffer`` (None when it passes, else the exception's
    class name). Replaced: the platform's support for state snapshots, which a CUDA machine
    (the default server's) has and this CPU does not."""
    from sglang.srt.arg_groups import mamba_hook

    mc = model_config(config, False, None)
    override = get_context().override_server_args(page_size=page_size, device="cpu",
                                                  **server_args)
    sa = override.install()
    try:
        declared = _mamba_strategy(sa, mc)
        if declared.get("mamba_radix_cache_strategy") != "extra_buffer":
            return None
        override.restore()
        override = get_context().override_server_args(
            page_size=page_size, device="cpu", **{**server_args, **declared})
        sa = override.install()
        platform = mamba_hook._platform_supports_mamba_cache_extra_buffer
        mamba_hook._platform_supports_mamba_cache_extra_buffer = lambda: True
        sa._model_config = mc
        try:
            mamba_hook.validate_mamba_extra_buffer(
                resolved_view(sa), mc.hf_config,
                mamba_cache_chunk_size_of=lambda: overrides_mod.mamba_cache_chunk_size(sa))
        except AssertionError as exc:
            return type(exc).__name__
        finally:
            mamba_hook._platform_supports_mamba_cache_extra_buffer = platform
            del sa._model_config
        return None
    finally:
        override.restore()


def _run(mc: ModelConfig, sa: Any, pre_gib: float, post_gib: float, page_size: int,
         kv_cache_dtype: str, window: int | None) -> dict[str, Any]:
    resolved, kv_dtype = kvd_mod.configure_kv_cache_dtype(
        server_args_kv_cache_dtype=kv_cache_dtype, model=None, model_dtype=mc.dtype,
        is_draft_worker=False, is_dflash=False, speculative_draft_attention_backend=None)
    stub = types.SimpleNamespace()
    kvc = kvc_mod.KVCacheConfigurator(
        device="cpu", gpu_id=0, attn_dp_size=get_parallel().attn_dp_size, pp_size=1,
        pp_group=_OnePipelineStage(), model=stub, model_config=mc, server_args=sa,
        kv_cache_dtype=kv_dtype, kv_cache_dtype_str=resolved or kv_cache_dtype,
        model_dtype=mc.dtype, page_size=page_size, sliding_window_size=window,
        spec_algorithm=SpeculativeAlgorithm.NONE, is_draft_worker=False,
        post_capture_kv_active=False, spec_aux_config=SpecAuxHiddenStateConfig(),
        is_hybrid_swa=mc.is_hybrid_swa, is_hybrid_swa_compress=mc.is_hybrid_swa_compress,
        use_mla_backend=mc.attention_arch == AttentionArch.MLA,
        layer_info=resolve_layer_indices(model=stub, model_config=mc, is_draft_worker=False),
        forward_stream=None, req_to_token_pool=None, token_to_kv_pool_allocator=None,
        memory_pool_config=None)
    configurator = pc_mod.create_memory_pool_configurator(kvc)
    with captured_logs(LOGGERS) as handler:
        reading, collect = kvc_mod.get_available_gpu_memory, kvc_mod.gc
        kvc_mod.get_available_gpu_memory = lambda *a, **k: float(post_gib)
        kvc_mod.gc = types.SimpleNamespace(collect=lambda *a: 0)
        out: dict[str, Any] = {"configurator": type(configurator).__name__,
                               "cell_size": configurator._cell_size,
                               "context_len": mc.context_len}
        try:
            # Parallel groups another module stamped (world_size 1) would fail SGLang's own check
            # in every tp > 1 case; the event-loop reference takes its stamp down after each case,
            # and any left are hidden here, as in a fresh process.
            no_groups = {group: types.SimpleNamespace() for _, group in _WIDTH_AND_GROUP}
            with get_parallel().override(world_group=types.SimpleNamespace(cpu_group=None), **no_groups):
                try:
                    pool = kvc._resolve_memory_pool_config(pre_gib)
                except (ValueError, RuntimeError) as exc:
                    out["error"] = str(exc).split(":")[0].split(".")[0]
                    return out
                out["max_total_num_tokens"] = pool.max_total_num_tokens
                out["max_running_requests"] = pool.max_running_requests
                out["swa_max_total_num_tokens"] = pool.swa_max_total_num_tokens
                out["max_mamba_cache_size"] = (get_schedule().max_mamba_cache_size
                                               if kvc.mambaish_config is not None else None)
                out["req_to_token_size"] = _build_on_meta(kvc, pool)
        finally:
            kvc_mod.get_available_gpu_memory, kvc_mod.gc = reading, collect
    out["log_lines"] = handler.lines
    return out


def _build_on_meta(kvc: Any, pool: Any) -> int:
    """Build the pools as ModelRunner does, on the meta device: they log their sizes. Returns
    the request table's ``size`` (the rows it hands out)."""
    kvc.device = "meta"
    had_meta = hasattr(torch, "meta")
    if not had_meta:  # the pools ask the device module for streams; meta has none
        torch.meta = torch.cpu
    try:
        sizes = kvc._derive_pool_sizes(config=pool)
        rows = kvc._build_req_to_token_pool(max_num_reqs=sizes.max_running_requests)
        hf = kvc.model_config.hf_config
        kvc._build_token_to_kv_pool(sizes=sizes, is_dsa_model=pc_mod.is_deepseek_dsa(hf),
                                    is_dsv4_model=pc_mod.is_deepseek_v4(hf),
                                    req_to_token_pool=rows)
        return rows.size
    finally:
        kvc.device = "cpu"
        if not had_meta:
            del torch.meta
