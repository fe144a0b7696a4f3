"""Seeded decode-attention inputs for tests, the book, the demo and the benchmark.

A case is a small paged KV pool with request rows scattered over a larger
``req_to_token`` and pages drawn in a random order, the way a pool looks after some
allocations and frees. Page 0 is never used, as in SGLang (``mem_cache/allocator.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from pagedkv.errors import bad_value, check_positive_int
from pagedkv.layers.attention.checks import check_decode_inputs
from pagedkv.layers.attention.decode_attention import LaunchPlan, plan_launch
from pagedkv.layers.attention.reference import decode_tolerance, pages_to_slots


@dataclass(frozen=True)
class DecodeCase:
    """Inputs of one decode step (shapes as in ``paged_decode_attention``)."""

    q: torch.Tensor
    k_cache: torch.Tensor
    v_cache: torch.Tensor
    page_table: torch.Tensor
    req_to_token: torch.Tensor
    req_pool_indices: torch.Tensor
    seq_lens: torch.Tensor
    page_size: int

    def slot_args(self) -> tuple[torch.Tensor, ...]:
        """Positional arguments of ``paged_decode_attention`` and the reference."""
        return (self.q, self.k_cache, self.v_cache, self.req_to_token,
                self.req_pool_indices, self.seq_lens)

    def page_args(self) -> tuple[torch.Tensor | int, ...]:
        """Positional arguments of ``paged_decode_attention_by_page``."""
        return (self.q, self.k_cache, self.v_cache, self.page_table,
                self.req_pool_indices, self.seq_lens, self.page_size)

    def plan(self, per_page: bool, num_kv_splits: int | None = None) -> LaunchPlan:
        """Check the inputs once and plan both launches of the per-page walk (``per_page``)
        or the per-slot walk over this case, for benchmarks and compile checks."""
        table = self.page_table if per_page else self.req_to_token
        page_size = self.page_size if per_page else 1
        shape = check_decode_inputs(self.q, self.k_cache, self.v_cache, table,
                                    self.req_pool_indices, self.seq_lens, page_size=page_size)
        return plan_launch(self.q, self.k_cache, self.v_cache, table, self.req_pool_indices,
                           self.seq_lens, shape, page_size=page_size, per_page=per_page,
                           sm_scale=None, num_kv_splits=num_kv_splits)

    def tolerance(self, reference: torch.Tensor) -> float:
        """How far a kernel's output may be from ``reference`` (the torch reference's output
        on this case): :func:`reference.decode_tolerance` with this case's sizes."""
        return decode_tolerance(self.q.dtype, int(self.seq_lens.max()),
                                float(self.v_cache.abs().max()),
                                float(reference.abs().max()))


def random_decode_case(
    seq_lens: list[int],
    *,
    num_q_heads: int,
    num_kv_heads: int,
    head_dim: int,
    page_size: int,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    seed: int = 0,
    shuffle: bool = True,
) -> DecodeCase:
    """Build a seeded case: q, K and V ~ N(0, 1), each request on its own pages.

    Args:
        seq_lens: tokens per request (each >= 1).
        num_q_heads, num_kv_heads, head_dim: attention geometry.
        page_size: tokens per page.
        dtype: of q, K and V.
        device: where the tensors live.
        seed: for values, page order and row order.
        shuffle: random page order and request rows (True) or consecutive pages in row
            order (False: the contiguous layout, paging without scattering).

    Returns:
        A :class:`DecodeCase` whose pool has one spare page per request and page 0 unused.

    Raises:
        ConfigError: an empty ``seq_lens``, a length < 1 or a size < 1.
    """
    if not seq_lens or min(seq_lens) < 1:
        raise bad_value("seq_lens", seq_lens, "a non-empty list of lengths >= 1")
    for name, value in (("num_q_heads", num_q_heads), ("num_kv_heads", num_kv_heads),
                        ("head_dim", head_dim), ("page_size", page_size)):
        check_positive_int(name, value)
    gen = torch.Generator().manual_seed(seed)
    batch = len(seq_lens)
    max_pages = -(-max(seq_lens) // page_size)
    num_pages = 1 + batch * (max_pages + 1)
    num_rows = batch + 2 if shuffle else batch
    order = torch.randperm(num_pages - 1, generator=gen) if shuffle else torch.arange(
        num_pages - 1)
    pages = (order[: batch * max_pages] + 1).reshape(batch, max_pages).to(torch.int32)
    rows = torch.randperm(num_rows, generator=gen)[:batch] if shuffle else torch.arange(batch)
    page_table = torch.zeros(num_rows, max_pages, dtype=torch.int32)
    page_table[rows] = pages

    values = torch.Generator(device=device).manual_seed(seed)  # drawn where they live

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=values, dtype=dtype, device=device)

    num_slots = num_pages * page_size
    return DecodeCase(
        q=randn(batch, num_q_heads, head_dim),
        k_cache=randn(num_slots, num_kv_heads, head_dim),
        v_cache=randn(num_slots, num_kv_heads, head_dim),
        page_table=page_table.to(device),
        req_to_token=pages_to_slots(page_table, page_size).to(device),
        req_pool_indices=rows.to(device),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=device),
        page_size=page_size,
    )
