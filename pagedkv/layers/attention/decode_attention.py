"""Paged decode attention in Triton: walk the page table, split the sequence, merge.

A lesson in the style of the Triton tutorials. Run ``python -m pagedkv.lessons.kernel``
to check the kernel against the torch reference and print the bandwidth it reached.

What decode attention does
--------------------------
At a decode step every running request adds one token. Its query ``q[b]`` (``[H_q, D]``)
attends over all ``L`` keys and values already in the KV cache. The arithmetic is tiny
(about 4 * L * H_q * D flops) and every byte of K and V is read once: decode attention is
bound by memory bandwidth, so the figure of merit is bytes moved per second (GB/s), as a
fraction of the GPU's peak HBM bandwidth.

Walking the page table
----------------------
The cache is a pool of slots ``k_cache[num_slots, H_kv, D]``. Token ``t`` of the request in
row ``r`` lives at slot ``req_to_token[r, t]`` (SGLang's ``ReqToTokenPool``). The kernel
loads ``BLOCK_N`` slot ids, then gathers those ``BLOCK_N`` rows of K and V: one indirect
load per token. This is what SGLang's Triton backend does (and its FlashInfer backend, which
plans FlashInfer's kernels with page size 1): the table has one entry per token whatever the
page size. :func:`paged_decode_attention_by_page` instead reads one *page id* per
``page_size`` tokens, as SGLang's FA3/FA4, TRT-LLM and FlashMLA backends are handed it
(:mod:`pagedkv.lessons.attention_backends`), and computes ``page * page_size + offset``.

Split-KV (flash-decoding)
-------------------------
With a small batch there are too few (request, head) pairs to fill the GPU's SMs. So
stage 1 cuts each sequence into ``num_kv_splits`` chunks (multiples of ``BLOCK_N``
tokens); one program per (request, KV-head group, chunk) runs an online softmax over its
chunk and writes a partial output ``o_s`` and its log-sum-exp ``lse_s``. Stage 2 merges:
``o = sum_s exp(lse_s - lse) o_s`` with ``lse = log sum_s exp(lse_s)``.

GQA: one KV tile for the whole group
------------------------------------
With ``G = H_q / H_kv`` query heads per KV head, a stage-1 program loads a K tile once and
multiplies it by all G queries at once with ``tl.dot`` (``[BLOCK_H, D] x [D, BLOCK_N]``),
so K and V are read once per KV head, not once per query head. SGLang's
``_fwd_grouped_kernel_stage1`` does the same (BLOCK_H 16, BLOCK_N 32); we use that one
kernel for MHA too (G = 1 fills one row of the 16-row tile).

Tensor cores: the dots stay in the cache's dtype
------------------------------------------------
``tl.dot`` on bf16 or fp16 operands becomes tensor-core ``mma`` instructions (``HMMA`` in
the machine code) from sm_80 on: exact 16-bit products summed in fp32. (Triton 3.9 leaves
the sm_75 tensor cores of a T4 unused and emits fp32 FMAs there.) Cast the operands to fp32 first
and the same dot becomes thousands of scalar fp32 fused multiply-adds per tile, enough
instructions to make a memory-bound kernel wait on instruction issue instead. So q, K and
V are loaded and multiplied in their own dtype; the softmax weights ``p`` are computed in
fp32 and rounded to V's dtype for the second dot, as SGLang does. The one exception is
Triton's CPU interpreter, which multiplies bfloat16 wrongly: there ``DOT_FP32`` (a
``tl.constexpr``, so the GPU build does not contain the branch) widens the operands to
fp32 *after* that rounding. A product of two 16-bit numbers is exact in fp32, so the
interpreter computes what the tensor cores compute, up to the order of the fp32 sums.

Pipelining the K/V loads
------------------------
Loaded and then used at once, a tile would leave its program idle for the whole memory
latency. Triton's software pipeliner (``num_stages``) issues the loads of later tiles
before the arithmetic of the current one, as asynchronous copies into shared memory
(sm_80 and later). It counts stages along the chain of dependent loads, and here the
chain is long: the table load gives the K/V addresses, so it runs table -> K/V -> dot.
With ``num_stages`` 2 (SGLang's value), 3 or 4, K and V get one buffer each, so the next
tile's copy starts only once the current tile has been consumed; ``NUM_STAGES = 5`` gives
them two, and the copies of tile i + 1 fly while tile i is multiplied. The price is shared
memory (two K and two V tiles per program), which caps the programs per SM
(``PROGRAMS_PER_SM``).

What the compiler makes of it
-----------------------------
``compiled.py`` compiles these kernels for sm_75, sm_80, sm_89 and sm_90 on a machine
without a GPU and reads back registers, spills, shared memory and the machine
instructions; ``tests/lessons/kernel/test_kernel_compiles.py`` holds them to a budget, and
``roofline.py`` turns them into a bandwidth ceiling per GPU (chapter 6 shows both).

Where we simplify (and why)
---------------------------
- Inputs are validated in Python (``checks.py``); SGLang trusts its scheduler. A model's
  decode step checks the batch's rows and slots once on the host and each layer's launch
  only the layout, so no launch reads from the device (``backend.py``).
- The default split count (:func:`default_num_kv_splits`) fills the GPU with one wave of
  programs; SGLang's ``get_num_kv_splits`` decides per request from the lengths.
- fp32 caches (a teaching case) multiply in IEEE fp32, not on the tensor cores.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from pagedkv.errors import check_positive_int
from pagedkv.layers.attention.checks import (
    DecodeShape,
    check_decode_inputs,
    check_decode_layout,
    check_launch_device,
    check_scale_and_splits,
    interpreted,
)

BLOCK_N = 32  # tokens per K/V tile, and the granularity of a split (SGLang: 32)
BLOCK_H = 16  # query heads per program (SGLang: 16); the tensor cores' smallest M is 16
NUM_WARPS = 4  # threads per program = 4 * 32 (SGLang: 4)
NUM_STAGES = 5  # two buffers each for K and V ("Pipelining" above; SGLang passes 2)
# Stage-1 programs per SM that fit at once, by compute capability: what the split count
# plans for, and what tests/lessons/kernel/test_kernel_compiles.py checks the compiled kernels against.
PROGRAMS_PER_SM = {75: 2, 80: 4, 89: 2, 90: 5}
MAX_DEFAULT_SPLITS = 16  # SGLang's default is 8; see default_num_kv_splits


@triton.jit
def _split_bounds(seq_len, split_id, num_splits, BLOCK: tl.constexpr):
    """Token range [start, end) of one split: equal chunks rounded up to whole tiles."""
    per_split = tl.cdiv(tl.cdiv(seq_len, num_splits), BLOCK) * BLOCK
    start = split_id * per_split
    end = tl.minimum(start + per_split, seq_len)
    return start, end


# num_splits is a runtime argument left unspecialized: one compiled kernel serves every
# split count (Triton would otherwise compile a separate kernel for the value 1).
@triton.jit(do_not_specialize=["num_splits"])
def _decode_stage1(
    Q, K, V, Table, ReqPoolIdx, SeqLens, MidO, MidLse,
    sm_scale, num_splits,
    stride_qb, stride_qh,
    stride_kt, stride_kh,
    stride_vt, stride_vh,
    stride_table,
    stride_mob, stride_moh, stride_mos,
    stride_lb, stride_lh,
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
    PER_PAGE: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    DOT_FP32: tl.constexpr,
):
    """One (request, block of query heads sharing a KV head, split) per program."""
    b = tl.program_id(0)
    head_block = tl.program_id(1)
    split_id = tl.program_id(2)
    blocks_per_group: tl.constexpr = (GROUP + BLOCK_H - 1) // BLOCK_H
    kv_head = head_block // blocks_per_group
    in_group = (head_block % blocks_per_group) * BLOCK_H + tl.arange(0, BLOCK_H)
    mask_h = in_group < GROUP
    heads = kv_head * GROUP + in_group
    offs_d = tl.arange(0, BLOCK_D)
    mask_d = offs_d < HEAD_DIM

    seq_len = tl.load(SeqLens + b)
    row = tl.load(ReqPoolIdx + b).to(tl.int64)
    start, end = _split_bounds(seq_len, split_id, num_splits, BLOCK_N)

    q = tl.load(
        Q + b * stride_qb + heads[:, None] * stride_qh + offs_d[None, :],
        mask=mask_h[:, None] & mask_d[None, :], other=0.0,
    )  # [BLOCK_H, BLOCK_D], in the cache dtype
    if DOT_FP32:  # the CPU interpreter only (module docstring)
        q = q.to(tl.float32)

    m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)  # running max of the scores
    l_i = tl.zeros([BLOCK_H], tl.float32)  # running sum of exp(score - m_i)
    acc = tl.zeros([BLOCK_H, BLOCK_D], tl.float32)  # running sum of p * V
    for tile in range(start, end, BLOCK_N):
        pos = tile + tl.arange(0, BLOCK_N)  # logical token positions
        mask_n = pos < end
        # The page-table walk: logical position -> physical slot.
        if PER_PAGE:
            page = tl.load(Table + row * stride_table + pos // PAGE_SIZE, mask=mask_n, other=0)
            slot = page.to(tl.int64) * PAGE_SIZE + pos % PAGE_SIZE
        else:
            slot = tl.load(Table + row * stride_table + pos, mask=mask_n, other=0).to(tl.int64)
        mask_kv = mask_n[:, None] & mask_d[None, :]
        k = tl.load(
            K + slot[:, None] * stride_kt + kv_head * stride_kh + offs_d[None, :],
            mask=mask_kv, other=0.0,
        )  # [BLOCK_N, BLOCK_D], read once for the whole group
        v = tl.load(
            V + slot[:, None] * stride_vt + kv_head * stride_vh + offs_d[None, :],
            mask=mask_kv, other=0.0,
        )
        if DOT_FP32:
            k = k.to(tl.float32)
        # Tensor cores: 16-bit products, fp32 sums. "ieee" only matters for fp32 caches
        # (exact fp32 instead of tf32).
        qk = tl.dot(q, tl.trans(k), input_precision="ieee") * sm_scale  # [BLOCK_H, BLOCK_N]
        qk = tl.where(mask_n[None, :], qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, axis=1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(qk - m_new[:, None])
        # The weights enter the second dot rounded to V's dtype, as the tensor cores take
        # them; the interpreter rounds them the same way before widening.
        p_dot = p.to(V.dtype.element_ty)
        if DOT_FP32:
            p_dot, v = p_dot.to(tl.float32), v.to(tl.float32)
        acc = acc * alpha[:, None] + tl.dot(p_dot, v, input_precision="ieee")
        l_i = l_i * alpha + tl.sum(p, axis=1)
        m_i = m_new

    if end > start:  # an empty split (short sequence) writes nothing; stage 2 skips it
        mid = b * stride_mob + heads[:, None] * stride_moh + split_id * stride_mos
        tl.store(MidO + mid + offs_d[None, :], acc / l_i[:, None],
                 mask=mask_h[:, None] & mask_d[None, :])
        tl.store(MidLse + b * stride_lb + heads * stride_lh + split_id, m_i + tl.log(l_i),
                 mask=mask_h)


@triton.jit(do_not_specialize=["num_splits"])
def _decode_stage2(
    MidO, MidLse, Out, SeqLens,
    num_splits,
    stride_mob, stride_moh, stride_mos,
    stride_lb, stride_lh,
    stride_ob, stride_oh,
    HEAD_DIM: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """One (request, query head) per program: merge the splits by their log-sum-exp."""
    b = tl.program_id(0)
    h = tl.program_id(1)
    offs_d = tl.arange(0, BLOCK_D)
    mask_d = offs_d < HEAD_DIM
    seq_len = tl.load(SeqLens + b)

    lse_max = float("-inf")
    weight_sum = 0.0
    acc = tl.zeros([BLOCK_D], tl.float32)
    for split_id in range(num_splits):
        start, end = _split_bounds(seq_len, split_id, num_splits, BLOCK_N)
        if end > start:
            lse = tl.load(MidLse + b * stride_lb + h * stride_lh + split_id)
            o_s = tl.load(MidO + b * stride_mob + h * stride_moh + split_id * stride_mos + offs_d,
                          mask=mask_d, other=0.0)
            new_max = tl.maximum(lse_max, lse)
            rescale = tl.exp(lse_max - new_max)
            weight = tl.exp(lse - new_max)
            acc = acc * rescale + weight * o_s
            weight_sum = weight_sum * rescale + weight
            lse_max = new_max
    tl.store(Out + b * stride_ob + h * stride_oh + offs_d,
             (acc / weight_sum).to(Out.dtype.element_ty), mask=mask_d)


def split_ranges(seq_len: int, num_kv_splits: int) -> list[tuple[int, int]]:
    """Token ranges ``[start, end)`` of each split of a sequence, as stage 1 computes them.

    Equal chunks rounded up to whole ``BLOCK_N``-token tiles; trailing splits of a short
    sequence are empty (``start >= end``) and are skipped by both stages. For teaching and
    tests; the kernels compute the same in ``_split_bounds``.

    Raises:
        ConfigError: ``seq_len`` or ``num_kv_splits`` not an integer >= 1.
    """
    check_positive_int("seq_len", seq_len)
    check_positive_int("num_kv_splits", num_kv_splits)
    per_split = triton.cdiv(triton.cdiv(seq_len, num_kv_splits), BLOCK_N) * BLOCK_N
    return [(s * per_split, min((s + 1) * per_split, seq_len)) for s in range(num_kv_splits)]


def default_num_kv_splits(batch: int, num_kv_heads: int, group: int, max_seq_len: int,
                          sm_count: int | None = None, arch: int | None = None) -> int:
    """Split count: one wave of stage-1 programs that fills every SM, at most 16.

    Stage 1 without splitting launches ``P = batch * H_kv * ceil(G / 16)`` programs. A
    memory-bound program keeps one or two K/V tiles in flight, so an SM needs several
    programs resident to cover the memory latency (``roofline.py``). We split until
    ``P * splits`` reaches ``sm_count * PROGRAMS_PER_SM[arch]`` without passing it (a
    second, partial wave would leave most SMs idle at its end), with at least one 32-token
    tile per split and at most 16 splits (SGLang's default cap is 8, which leaves a single
    request on an H100 with 64 programs for 132 SMs). Under the CPU interpreter programs
    run one after another, so splitting only adds work: 1.

    Args:
        batch, num_kv_heads, group: the launch's requests, KV heads and query heads per KV
            head.
        max_seq_len: the longest sequence, in tokens.
        sm_count, arch: the GPU's SMs and compute capability (90 for sm_90); default: the
            current CUDA device's. An arch without an entry in ``PROGRAMS_PER_SM`` counts 2.

    Raises:
        ConfigError: a size that is not an integer >= 1.
    """
    for name, value in (("batch", batch), ("num_kv_heads", num_kv_heads), ("group", group),
                        ("max_seq_len", max_seq_len)):
        check_positive_int(name, value)
    if sm_count is None:
        if interpreted():
            return 1
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        sm_count, arch = props.multi_processor_count, props.major * 10 + props.minor
    check_positive_int("sm_count", sm_count)
    programs = batch * num_kv_heads * triton.cdiv(group, BLOCK_H)
    wanted = sm_count * PROGRAMS_PER_SM.get(arch, 2) // programs
    return max(1, min(MAX_DEFAULT_SPLITS, wanted, triton.cdiv(max_seq_len, BLOCK_N)))


@dataclass(frozen=True)
class LaunchPlan:
    """Everything both launches need: grids, positional arguments, keyword arguments (the
    ``tl.constexpr`` values and the compiler options) and the output tensor."""

    grid1: tuple[int, int, int]
    args1: tuple[object, ...]
    kwargs1: dict[str, object]
    grid2: tuple[int, int]
    args2: tuple[object, ...]
    kwargs2: dict[str, object]
    out: torch.Tensor
    num_splits: int


def plan_launch(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    table: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    shape: DecodeShape,
    *,
    page_size: int,
    per_page: bool,
    sm_scale: float | None,
    num_kv_splits: int | None,
) -> LaunchPlan:
    """Arguments of both stages for inputs that ``check_decode_inputs`` has accepted.

    Allocates the split intermediates and the output. ``compiled.py`` hands the same plan
    to Triton's warm-up compile, so what it inspects is exactly what a launch runs.
    """
    scale = 1.0 / math.sqrt(shape.head_dim) if sm_scale is None else float(sm_scale)
    splits = num_kv_splits or default_num_kv_splits(
        shape.batch, shape.num_kv_heads, shape.group, shape.max_seq_len)
    # The kernels index these with unit strides: make them so (a no-op when they already are).
    q, req_pool_indices, seq_lens = (t.contiguous() for t in (q, req_pool_indices, seq_lens))
    batch, num_q_heads, head_dim = shape.batch, shape.num_q_heads, shape.head_dim
    mid_o = torch.empty((batch, num_q_heads, splits, head_dim), dtype=torch.float32,
                        device=q.device)
    mid_lse = torch.empty((batch, num_q_heads, splits), dtype=torch.float32, device=q.device)
    o = torch.empty_like(q)
    block_d = max(16, triton.next_power_of_2(head_dim))  # tl.dot dims >= 16, as BLOCK_H
    gpu = {} if interpreted() else {"num_warps": NUM_WARPS, "num_stages": NUM_STAGES}
    return LaunchPlan(
        grid1=(batch, shape.num_kv_heads * triton.cdiv(shape.group, BLOCK_H), splits),
        args1=(q, k_cache, v_cache, table, req_pool_indices, seq_lens, mid_o, mid_lse,
               scale, splits,
               q.stride(0), q.stride(1),
               k_cache.stride(0), k_cache.stride(1),
               v_cache.stride(0), v_cache.stride(1),
               table.stride(0),
               mid_o.stride(0), mid_o.stride(1), mid_o.stride(2),
               mid_lse.stride(0), mid_lse.stride(1)),
        kwargs1={"GROUP": shape.group, "HEAD_DIM": head_dim, "PAGE_SIZE": page_size,
                 "PER_PAGE": per_page, "BLOCK_H": BLOCK_H, "BLOCK_N": BLOCK_N,
                 "BLOCK_D": block_d, "DOT_FP32": interpreted(), **gpu},
        grid2=(batch, num_q_heads),
        args2=(mid_o, mid_lse, o, seq_lens, splits,
               mid_o.stride(0), mid_o.stride(1), mid_o.stride(2),
               mid_lse.stride(0), mid_lse.stride(1),
               o.stride(0), o.stride(1)),
        kwargs2={"HEAD_DIM": head_dim, "BLOCK_N": BLOCK_N, "BLOCK_D": block_d, **gpu},
        out=o,
        num_splits=splits,
    )


def run_plan(plan: LaunchPlan) -> torch.Tensor:
    """Launch both stages of ``plan`` and return its output tensor. A benchmark plans once
    and runs the plan many times (the split buffers are reused, as SGLang preallocates)."""
    _decode_stage1[plan.grid1](*plan.args1, **plan.kwargs1)
    _decode_stage2[plan.grid2](*plan.args2, **plan.kwargs2)
    return plan.out


def _launch(*args: object, **kwargs: object) -> torch.Tensor:
    """Plan and run both stages (arguments as :func:`plan_launch`). No checks here."""
    return run_plan(plan_launch(*args, **kwargs))


def paged_decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    *,
    sm_scale: float | None = None,
    num_kv_splits: int | None = None,
    max_seq_len: int | None = None,
) -> torch.Tensor:
    """Decode attention over a paged KV cache, one slot id per token (SGLang's Triton backend).

    Args:
        q: ``[B, H_q, D]`` float32/float16/bfloat16: the queries of the current token.
        k_cache, v_cache: ``[num_slots, H_kv, D]``, one layer of ``MHATokenToKVPool``, q's
            dtype; slot = page * page_size + offset. ``H_q % H_kv == 0`` (MHA, GQA, MQA).
        req_to_token: int32 ``[R, max_context_len]``: slot of token t of the request in row r.
        req_pool_indices: int32/int64 ``[B]``: the row of each request, in ``[0, R)``.
        seq_lens: int32/int64 ``[B]``: tokens in the cache including the current one, in
            ``[1, max_context_len]``.
        sm_scale: softmax scale, default ``1 / sqrt(D)``.
        num_kv_splits: chunks per sequence (flash-decoding); default
            :func:`default_num_kv_splits`.
        max_seq_len: None (default): every row, length and slot is checked here
            (:func:`~pagedkv.layers.attention.checks.check_decode_values`, device reads).
            Given: the caller has run those checks on this batch already, once, and this
            is ``max(seq_lens)``; the launch then checks the layout only and reads no value
            from the device (a model's layers, :mod:`pagedkv.layers.attention.backend`).

    Returns:
        ``o`` ``[B, H_q, D]`` in q's dtype, accumulated in float32 (16-bit dtypes: the
        softmax weights are rounded to that dtype before they multiply V, see
        ``reference.decode_tolerance``).

    Raises:
        ConfigError: a bad shape, dtype, device, length, row, slot, scale or split count
            (the message names it, its value and the valid range; rows, lengths and slots
            only without ``max_seq_len``). Nothing is launched.

    Source: SGLang 0.5.23 ``sglang/kernels/ops/attention/decode_attention.py``
    (``_fwd_grouped_kernel_stage1``, ``_fwd_kernel_stage2``; in 0.5.9 the file was
    ``srt/layers/attention/triton_ops/decode_attention.py``).
    """
    check_launch_device(q)
    check_scale_and_splits(sm_scale, num_kv_splits)
    if max_seq_len is None:
        shape = check_decode_inputs(q, k_cache, v_cache, req_to_token, req_pool_indices,
                                    seq_lens)
    else:  # the batch's values were checked once, on the host: no device read per launch
        check_positive_int("max_seq_len", max_seq_len)
        shape = DecodeShape(*check_decode_layout(q, k_cache, v_cache, req_to_token,
                                                 req_pool_indices, seq_lens), max_seq_len)
    return _launch(q, k_cache, v_cache, req_to_token, req_pool_indices, seq_lens, shape,
                   page_size=1, per_page=False, sm_scale=sm_scale, num_kv_splits=num_kv_splits)


def paged_decode_attention_by_page(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    page_table: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    page_size: int,
    *,
    sm_scale: float | None = None,
    num_kv_splits: int | None = None,
) -> torch.Tensor:
    """Decode attention reading one page id per page (the table SGLang hands FA3 and FA4).

    Token ``t`` of row ``r`` lives at slot ``page_table[r, t // page_size] * page_size +
    t % page_size``. Same maths and result as :func:`paged_decode_attention` on
    ``pages_to_slots(page_table, page_size)``; the table read is ``page_size`` times smaller.

    Args:
        q, k_cache, v_cache, req_pool_indices, sm_scale, num_kv_splits: as in
            :func:`paged_decode_attention`.
        page_table: int32 ``[R, max_pages]`` of page ids, each in ``[0, num_slots // page_size)``.
        seq_lens: int32/int64 ``[B]``, in ``[1, max_pages * page_size]``.
        page_size: tokens per page, an integer >= 1.

    Returns:
        ``o`` ``[B, H_q, D]`` in q's dtype.

    Raises:
        ConfigError: as :func:`paged_decode_attention`, plus a bad ``page_size`` or page id.

    Source: SGLang ``python/sglang/srt/layers/attention/flashattention_backend.py`` (page
    table built as ``req_to_token[:, ::page_size] // page_size``, 0.5.9 and 0.5.23); the same
    layout as FlashInfer's own paged-KV API (which SGLang drives with page size 1 instead).
    """
    check_launch_device(q)
    check_positive_int("page_size", page_size)
    check_scale_and_splits(sm_scale, num_kv_splits)
    shape = check_decode_inputs(q, k_cache, v_cache, page_table, req_pool_indices, seq_lens,
                                table_name="page_table", page_size=page_size)
    return _launch(q, k_cache, v_cache, page_table, req_pool_indices, seq_lens, shape,
                   page_size=page_size, per_page=True, sm_scale=sm_scale,
                   num_kv_splits=num_kv_splits)
