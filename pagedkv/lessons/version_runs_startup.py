"""The start-up cases behind :data:`pagedkv.lessons.versions.DEMOS` (server arguments, pool
sizing, attention backends): each runs pagedkv under a :class:`~pagedkv.releases.Release` and
says in words what came out, reading the one field its name says. The scheduling cases are in
:mod:`pagedkv.lessons.version_runs`.
"""

from __future__ import annotations

from typing import Any

from pagedkv.configs.dsa_config import indexer_bytes_per_token
from pagedkv.configs.model_presets import load_model
from pagedkv.errors import ConfigError, NotEnoughMemoryError
from pagedkv.gpus import get_gpu
from pagedkv.hybrid_pools import mamba_slots_per_request, mamba_tracking_slots
from pagedkv.lessons.attention_backends import (
    default_attention_backend,
    gpt_oss_attention_backend,
    resolve_page_size,
)
from pagedkv.releases import Release
from pagedkv.server_args import default_mem_fraction_static, gpu_memory_defaults
from pagedkv.sizing import KVPoolPlan, plan_pool
from pagedkv.units import GiB

# ----- server arguments and start-up ---------------------------------------------------------
_RTX_4090_MIB = 24_564


def chunk_default(r: Release) -> str:
    """``Release.chunked_prefill_size_20_35_gib`` on an RTX 4090 (24 GB)."""
    return f"{gpu_memory_defaults(_RTX_4090_MIB, 1, r)[0]:,} tokens"


def graph_default(r: Release) -> str:
    """``Release.cuda_graph_max_bs_20_35_gib`` on an RTX 4090 (24 GB), tp 1."""
    return f"{gpu_memory_defaults(_RTX_4090_MIB, 1, r)[1]} requests"


def prefill_graph_reserve(r: Release) -> str:
    """``Release.prefill_cuda_graph_reserve`` on an H100, tp 1."""
    f = default_mem_fraction_static(get_gpu("h100-sxm-80gb").memory_mib, sglang_version=r)
    return f"mem_fraction_static {f:.3f}"


def pool_plan(r: Release, **options: Any) -> KVPoolPlan:
    """Qwen3-4B's pool on an RTX 4090 under ``r``, with ``plan_pool``'s ``options``."""
    return plan_pool("qwen3-4b", gpu="rtx-4090", sglang_version=r, **options)


def rows_are_cap(r: Release) -> str:
    """``Release.req_to_token_rows_are_cap`` on Qwen3-4B on an RTX 4090, --max-total-tokens 1000."""
    plan = pool_plan(r, mem_fraction_static=0.8, max_total_tokens=1000)
    # the rows handed out (REQUEST_ROWS_RULE's ``size``); 0.5.23's padding row is the
    # req_pool_padding_row field's own row of the table, so it is left out here
    rows = plan.req_to_token_pool_size
    return f"{rows:,} request rows handed out, for at most {plan.max_running_requests} running requests"


def rows_from_final_pool(r: Release) -> str:
    """``Release.req_rows_from_final_pool`` on Qwen3-4B on an H100, --max-total-tokens 100000
    (the profiled pool holds over 160k tokens, 4 contexts: the 4,096-row ceiling)."""
    plan = plan_pool("qwen3-4b", gpu="h100-sxm-80gb", sglang_version=r, max_total_tokens=100_000)
    return f"max_running_requests {plan.max_running_requests:,}"


def null_head_dim(r: Release) -> str:
    """``Release.null_head_dim_sized`` on Mixtral-8x7B (its config has no head_dim) on two
    H100s."""
    try:
        plan = plan_pool("mixtral-8x7b", gpu="h100-sxm-80gb", tp=2, sglang_version=r)
    except ConfigError:
        return "start-up fails (TypeError)"
    return f"{plan.cell_size:,} bytes per token"


def layered_rope_context(r: Release) -> str:
    """``Release.context_len_skips_layered_rope`` on Gemma-3-27B on an H100."""
    plan = plan_pool("gemma-3-27b", gpu="h100-sxm-80gb", sglang_version=r)
    return f"context_len {plan.context_len:,}"


def _hybrid_plan(model: str, r: Release, tp: int, **options: Any) -> KVPoolPlan:
    """``model`` on an H100 read as 79 GiB free before the weights and 40 GiB after, at
    mem_fraction_static 0.85."""
    return plan_pool(model, pre_free_bytes=79 * GiB, post_free_bytes=40 * GiB,
                     mem_fraction_static=0.85, tp=tp, sglang_version=r, **options)


def sizer(r: Release) -> str:
    """``Release.sized_by_pool_configurator`` on Qwen3-4B on an RTX 4090: the class that
    sizes its pool."""
    return pool_plan(r, mem_fraction_static=0.8).configurator or "no configurator class"


def multimodal_reserve(r: Release) -> str:
    """``Release.multimodal_kv_reservation`` on Gemma-3-27B with --enable-multimodal (79 GiB
    free before the weights, 40 GiB after)."""
    plan = _hybrid_plan("gemma-3-27b", r, 1, enable_multimodal=True)
    return f"{plan.max_total_num_tokens:,} tokens"


def swa_split(r: Release) -> str:
    """``Release.swa_sized_by_configurator`` on gpt-oss-20b (79 GiB free, 40 GiB after),
    --max-total-tokens 100000: 0.5.9 caps the count profiled at every layer's bytes, then
    redistributes it."""
    plan = _hybrid_plan("gpt-oss-20b", r, 1, max_total_tokens=100_000)
    return f"{plan.max_total_num_tokens:,} full + {plan.swa_max_total_num_tokens:,} window tokens"


def swa_lines(r: Release) -> str:
    """``Release.swa_pool_lines_labelled`` on gpt-oss-20b: the two allocation lines' labels,
    in order."""
    plan = _hybrid_plan("gpt-oss-20b", r, 1)
    window = f"#tokens: {plan.swa_max_total_num_tokens},"
    return " then ".join(
        f"'{line.split('. ')[0]}' ({'window' if window in line else 'full'} pool)"
        for line in plan.pool_log_lines() if "Cache is allocated" in line)


def state_slots(r: Release) -> str:
    """``Release.mamba_share_keeps_padding_slot`` on Qwen3-Next-80B-A3B at tp 4."""
    return f"{_hybrid_plan('qwen3-next-80b-a3b', r, 4).mamba_slots:,} state slots"


def mamba_cap_line(r: Release) -> str:
    """``Release.mamba_cap_warns`` on Qwen3-Next-80B-A3B at tp 4 (the state slots per request
    cap the running requests)."""
    plan = _hybrid_plan("qwen3-next-80b-a3b", r, 4)
    said = any("capped to" in line for line in plan.pool_log_lines())
    return "a warning names the cap" if said else "no line about the cap"


def mamba_slots_counted(r: Release) -> str:
    """``Release.mamba_auto_extra_buffer``: the state slots SGLang counts per running request
    of Qwen3-Next-80B-A3B with the radix cache and every strategy flag at its default (the
    overlap loop on, pages of one token), as the cap on running requests counts them."""
    tracking = mamba_tracking_slots(disable_radix_cache=False, page_size=1,
                                    disable_overlap_schedule=False,
                                    auto_extra_buffer=r.mamba_auto_extra_buffer)
    return f"{mamba_slots_per_request(False, tracking)} state slots per running request"


def running_cap(r: Release) -> str:
    """``Release.cap_running_at_half_pool`` on --max-running-requests 4000 on a 1,000-token pool."""
    plan = pool_plan(r, mem_fraction_static=0.8, max_total_tokens=1000, max_running_requests=4000)
    return f"max_running_requests {plan.max_running_requests:,}"


def paged_before_cap(r: Release) -> str:
    """``Release.page_pool_before_cap`` on Qwen3-4B on an RTX 4090, pages of 64, a cap above
    the pool: the profiled count SGLang's warning names."""
    plan = pool_plan(r, mem_fraction_static=0.8, page_size=64, max_total_tokens=10**9)
    return "the warning names " + plan.warnings[0].split("profiled value ")[1].split(".")[0]


def allocation_log(r: Release) -> str:
    """``Release.kv_dtype_in_allocation_log`` on Qwen3-4B on an RTX 4090 at mem_fraction_static
    0.80 (N tokens)."""
    plan = pool_plan(r, mem_fraction_static=0.8)
    line = next(x for x in plan.log_lines() if "allocated" in x)
    return line.split(", K size")[0].replace(str(plan.max_total_num_tokens), "N")


def weights_error(r: Release) -> str:
    """``Release.weights_leave_no_memory_error`` on Qwen3-4B on an RTX 4090 at mem_fraction_static
    0.20."""
    try:
        pool_plan(r, mem_fraction_static=0.2)
    except NotEnoughMemoryError as e:
        return str(e).split(" for the KV cache")[0].split(". Please")[0]
    return "starts"


# ----- attention backends --------------------------------------------------------------------
def offered(r: Release) -> str:
    """``Release.attention_backends`` on --attention-backend cutlass_mla, no --page-size."""
    try:
        return f"page size {resolve_page_size('cutlass_mla', None, r)}"
    except ConfigError:
        return "not offered"


def forced_page(r: Release) -> str:
    """``Release.forced_page_sizes`` on --attention-backend trtllm_mha --page-size 128."""
    return f"page size {resolve_page_size('trtllm_mha', 128, r)}"


def fa4(r: Release) -> str:
    """``Release.fa4_for_asymmetric_kv`` on a B200, K and V rows of different widths."""
    return default_attention_backend(100, r, asymmetric_kv=True)


def sinks(r: Release) -> str:
    """``Release.flashinfer_avoids_attention_sinks`` on an L40 (sm_89), a model with attention
    sinks and no backend rule of its own (e.g. MiMo-V2-Flash)."""
    return default_attention_backend(89, r, attention_sinks=True)


def gpt_oss_rocm(r: Release) -> str:
    """``Release.gpt_oss_aiter_on_rocm``: gpt-oss on an MI300X, no ``--attention-backend``."""
    return gpt_oss_attention_backend(0, r, platform="rocm")


def dsa_fp8_plan(r: Release) -> KVPoolPlan:
    """DeepSeek V3.2 on eight H200 with an fp8_e4m3 KV cache (80 GiB of weights per GPU), sized
    under ``r``: the start the release table's two DSA rows and the cheat sheet's cell-size
    formula read."""
    return plan_pool("deepseek-v3.2", gpu="h200-141gb", tp=8, kv_cache_dtype="fp8_e4m3",
                     weights_bytes=80 * GiB, sglang_version=r)


def dsa_backends(r: Release) -> str:
    """``Release.dsa_attention_backend`` on DeepSeek V3.2 with an fp8_e4m3 KV cache on an H200:
    the backend line SGLang prints (the pool is the same)."""
    return dsa_fp8_plan(r).server_args_lines[-1]


def dsa_fp8_cell(r: Release) -> str:
    """``Release.dsa_fp8_latent_profiled_as_stored`` on the same start: the bytes per token
    the pool is sized with, split per layer into the latent and the indexer key
    (:func:`pagedkv.configs.dsa_config.indexer_bytes_per_token`), which both releases count."""
    cell = dsa_fp8_plan(r).cell_size
    model = load_model("deepseek-v3.2")
    layers, key = model.num_hidden_layers, indexer_bytes_per_token(model.index_head_dim)
    per_layer = cell // layers
    return (f"{cell:,} B per token ({layers} layers x {per_layer:,} B: "
            f"{per_layer - key:,} B of latent and the indexer key's {key:,} B)")
