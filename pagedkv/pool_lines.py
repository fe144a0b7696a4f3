"""The lines SGLang's pools print when they are allocated, for every family pagedkv sizes.

Each per-layer buffer holds one padding page more than the pool's tokens (``size +
page_size`` rows), and "GB" is GiB (bytes / 2^30). Sources (0.5.23): ``mem_cache/memory_pool.py``
``_finalize_allocation_log`` (one pool, and each of the two pools of a sliding-window hybrid,
named "Full" and "SWA"), ``mem_cache/swa_memory_pool.py`` ``SWAKVPool.__init__`` (their
sum), ``mem_cache/memory_pool.py`` ``MambaPool.__init__`` (the state slots, plus one padding
slot; the line ends with a space).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pagedkv.units import GiB

if TYPE_CHECKING:
    from pagedkv.pool_plan import KVPoolPlan


def _kv_line(label: str, dtype: str | None, tokens: int, k: int, v: int | None) -> str:
    head = f"{label}KV Cache is allocated. " + (f"dtype: {dtype}, " if dtype else "")
    size = (f"KV size: {k / GiB:.2f} GB" if v is None
            else f"K size: {k / GiB:.2f} GB, V size: {v / GiB:.2f} GB")
    return f"{head}#tokens: {tokens}, {size}"


def allocation_lines(plan: KVPoolPlan, dtype: str | None) -> list[str]:
    """SGLang's allocation lines for ``plan``'s pools; ``dtype`` (``"torch.bfloat16"``) is
    printed when the release prints it, None otherwise."""
    v = None if plan.is_mla else plan.v_size_bytes
    if plan.is_swa:
        rows = plan.swa_max_total_num_tokens + plan.page_size
        half = rows * plan.swa_cell_size // 2  # K and V of every window layer
        total = plan.k_size_bytes + plan.v_size_bytes + 2 * half
        return [
            _kv_line("Full ", dtype, plan.max_total_num_tokens, plan.k_size_bytes, v),
            _kv_line("SWA ", dtype, plan.swa_max_total_num_tokens, half, half),
            f"SWAKVPool mem usage: {total / GiB:.2f} GB, swa size: "
            f"{plan.swa_max_total_num_tokens}, full size: {plan.max_total_num_tokens}",
        ]
    lines = []
    if plan.mamba_slots:
        slots = plan.mamba_slots + 1
        lines.append(f"Mamba Cache is allocated. max_mamba_cache_size: {plan.mamba_slots}, "
                     f"conv_state size: {slots * plan.conv_state_bytes / GiB:.2f}GB, "
                     f"ssm_state size: {slots * plan.ssm_state_bytes / GiB:.2f}GB ")
    lines.append(_kv_line("", dtype, plan.max_total_num_tokens, plan.k_size_bytes, v))
    return lines
