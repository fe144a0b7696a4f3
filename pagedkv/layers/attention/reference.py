"""Paged decode attention in plain torch: gather the slots, then softmax. Slow and clear.

This is the definition the Triton kernel is tested against, and the version to read first.
For request ``b`` with ``L = seq_lens[b]`` tokens in the cache and row
``r = req_pool_indices[b]`` of ``req_to_token``:

    slots  = req_to_token[r, :L]                       # physical KV slots, one per token
    K, V   = k_cache[slots], v_cache[slots]            # [L, H_kv, D]
    o[b,h] = softmax(q[b,h] . K[:, h // G]^T * sm_scale) @ V[:, h // G]

where ``G = H_q // H_kv`` query heads share one KV head (G = 1: MHA; H_kv = 1: MQA).
The table layouts follow SGLang's ``mem_cache/memory_pool.py`` (``req_to_token``) and its
FA3 backend (``layers/attention/flashattention_backend.py``, which builds a page table as
``req_to_token[:, ::page_size] // page_size``).
"""

from __future__ import annotations

import math

import torch

from pagedkv.errors import bad_value, check_positive_int
from pagedkv.layers.attention.checks import check_decode_inputs, check_scale_and_splits


def paged_decode_attention_ref(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    *,
    sm_scale: float | None = None,
) -> torch.Tensor:
    """One decode step of attention over a paged KV cache, in fp32 torch.

    Args:
        q: ``[B, H_q, D]`` float32/float16/bfloat16, the current token's queries.
        k_cache, v_cache: ``[num_slots, H_kv, D]``, one layer of the pool, q's dtype.
        req_to_token: int32 ``[R, max_context_len]``, slot of each token of each request row.
        req_pool_indices: int ``[B]``, the row of each request.
        seq_lens: int ``[B]``, tokens in the cache including the current one.
        sm_scale: softmax scale; default ``1 / sqrt(D)``.

    Returns:
        ``o`` ``[B, H_q, D]`` in q's dtype, computed in float32.

    Raises:
        ConfigError: any input outside its valid range (see ``checks.check_decode_inputs``).
    """
    check_scale_and_splits(sm_scale, None)
    shape = check_decode_inputs(q, k_cache, v_cache, req_to_token, req_pool_indices, seq_lens)
    scale = 1.0 / math.sqrt(shape.head_dim) if sm_scale is None else float(sm_scale)
    out = torch.empty_like(q)
    for b in range(shape.batch):
        slots = req_to_token[int(req_pool_indices[b]), : int(seq_lens[b])].long()
        k = k_cache[slots].float().repeat_interleave(shape.group, dim=1)  # [L, H_q, D]
        v = v_cache[slots].float().repeat_interleave(shape.group, dim=1)
        scores = torch.einsum("hd,lhd->hl", q[b].float(), k) * scale
        out[b] = torch.einsum("hl,lhd->hd", scores.softmax(dim=-1), v).to(q.dtype)
    return out


def pages_to_slots(page_table: torch.Tensor, page_size: int) -> torch.Tensor:
    """Expand a page table to a per-token slot table.

    Args:
        page_table: int32 ``[R, max_pages]`` of page ids.
        page_size: tokens per page; token ``t`` lives at ``page * page_size + t % page_size``.

    Returns:
        int32 ``[R, max_pages * page_size]``, the ``req_to_token`` layout.

    Raises:
        ConfigError: ``page_size`` not an integer >= 1.
    """
    check_positive_int("page_size", page_size)
    offsets = torch.arange(page_size, dtype=torch.int32, device=page_table.device)
    slots = page_table[:, :, None] * page_size + offsets
    return slots.reshape(page_table.shape[0], -1).to(torch.int32)


def slots_to_pages(req_to_token: torch.Tensor, page_size: int) -> torch.Tensor:
    """One page id per page: ``req_to_token[:, ::page_size] // page_size``.

    Correct only where the slots of each page are consecutive and page-aligned, which is
    what SGLang's ``PagedTokenToKVPoolAllocator`` guarantees (``mem_cache/allocator.py``).

    Args:
        req_to_token: int32 ``[R, max_context_len]``.
        page_size: tokens per page.

    Returns:
        int32 ``[R, ceil(max_context_len / page_size)]``.

    Raises:
        ConfigError: ``page_size`` not an integer >= 1.
    """
    check_positive_int("page_size", page_size)
    return (req_to_token[:, ::page_size] // page_size).to(torch.int32)


# Significant bits of each dtype (bf16 8, fp16 11, fp32 24).
_SIGNIFICAND_BITS = {torch.bfloat16: 8, torch.float16: 11, torch.float32: 24}
_FP32_UNIT = 2.0**-24


def decode_tolerance(dtype: torch.dtype, max_seq_len: int, v_absmax: float,
                     o_absmax: float) -> float:
    """A bound on ``|kernel - reference|`` for one decode step, on the CPU or a GPU.

    Three sources, each bounded for the worst case (``u = 2^-24``, fp32's unit roundoff;
    ``p`` are the softmax weights, ``n = max_seq_len``):

    1. The kernel rounds ``p`` to the cache dtype before ``p @ V`` (the tensor cores take
       16-bit inputs) but sums the unrounded ``p``; each weight is off by at most a relative
       ``2^-s`` (``s`` significant bits: bf16 8, fp16 11), so the output by at most
       ``2^-s * max|v|``. fp16 adds ``2^-25`` absolute per weight below its normal range
       (``2^-14``): at most ``n * 2^-25 * max|v|``. fp32 caches round nothing here.
    2. fp32 arithmetic, in the kernel and in the reference: sums of ``n`` terms (relative
       error up to about ``n * u`` for the numerator and the denominator), ``exp`` (on a GPU
       the approximate ``ex2.approx``, about ``2^-22`` relative, plus the rounding of its
       argument, at most ``17 u`` relative for weights above ``2^-24``) and the approximate
       division (2 ulp): ``(4 n + 32) * u * max|v|`` covers both implementations.
    3. Both round the output to the dtype: at most one unit in the last place of
       ``max|o|``.

    Args:
        dtype: of q, K, V and the output.
        max_seq_len: the longest sequence, in tokens.
        v_absmax: largest ``|V|`` the step reads (the whole pool's is a safe stand-in).
        o_absmax: largest ``|o|`` of the reference.

    Returns:
        The bound, in the output's units.

    Raises:
        ConfigError: an unsupported dtype or ``max_seq_len`` < 1.
    """
    if dtype not in _SIGNIFICAND_BITS:
        raise bad_value("dtype", dtype, "torch.float32, torch.float16 or torch.bfloat16")
    check_positive_int("max_seq_len", max_seq_len)
    bits = _SIGNIFICAND_BITS[dtype]
    weights = 0.0 if dtype == torch.float32 else 2.0**-bits
    if dtype == torch.float16:
        weights += max_seq_len * 2.0**-25
    fp32 = (4 * max_seq_len + 32) * _FP32_UNIT
    last_place = 2.0 ** (math.floor(math.log2(o_absmax)) - (bits - 1)) if o_absmax > 0 else 0.0
    return (weights + fp32) * v_absmax + last_place
