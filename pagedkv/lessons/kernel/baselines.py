"""What the decode kernel is measured against: torch SDPA, FlashInfer and a plain copy.

Each function takes a :class:`DecodeCase` and returns a callable that runs one decode step
(or one copy) on its tensors, so a benchmark can time all of them on the same data:

- :func:`sdpa_runner`: ``torch.nn.functional.scaled_dot_product_attention`` on a
  contiguous ``[B, H_kv, L, D]`` copy of the cache (no paging at all);
- :func:`flashinfer_runner`: FlashInfer's paged decode over the case's own pages (needs
  the ``flashinfer`` package);
- :func:`copy_runner`: a device-to-device copy of the K pool, the practical roofline: the
  bandwidth a GPU reaches when it does nothing but move bytes.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.nn import functional as F

from pagedkv.errors import bad_value
from pagedkv.lessons.kernel.cases import DecodeCase


def contiguous_kv(case: DecodeCase) -> tuple[torch.Tensor, torch.Tensor]:
    """K and V of a case built with ``shuffle=False, page_size=1`` and equal lengths, as
    contiguous ``[B, H_kv, L, D]`` tensors (a copy: SDPA wants heads before tokens).

    Raises:
        ConfigError: the lengths differ, or the case's slots are not in request order.
    """
    lens = case.seq_lens.tolist()
    batch, length = len(lens), lens[0]
    if any(n != length for n in lens):
        raise bad_value("case.seq_lens", lens, "equal lengths (a rectangular batch)")
    want = torch.arange(1, 1 + batch * length, device=case.req_to_token.device)
    rows = case.req_to_token[case.req_pool_indices.long(), :length].reshape(-1)
    if not torch.equal(rows.long(), want):
        raise bad_value("case", "a shuffled pool", "random_decode_case(shuffle=False, "
                        "page_size=1): slot 1 + b * L + t for token t of request b")
    shape = (batch, length, *case.k_cache.shape[1:])

    def heads_first(pool: torch.Tensor) -> torch.Tensor:
        return pool[1:1 + batch * length].view(shape).transpose(1, 2).contiguous()

    return heads_first(case.k_cache), heads_first(case.v_cache)


def sdpa_runner(case: DecodeCase) -> Callable[[], torch.Tensor]:
    """One decode step with torch SDPA on the contiguous K/V of ``case`` (GQA by
    ``enable_gqa``); output ``[B, H_q, 1, D]``. Raises as :func:`contiguous_kv`."""
    k, v = contiguous_kv(case)
    q = case.q[:, :, None, :]
    return lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)


def copy_runner(case: DecodeCase) -> Callable[[], torch.Tensor]:
    """A copy of the K pool into a new tensor; it moves :func:`copy_bytes` bytes."""
    dst = torch.empty_like(case.k_cache)
    return lambda: dst.copy_(case.k_cache)


def copy_bytes(case: DecodeCase) -> int:
    """Bytes :func:`copy_runner` moves: the K pool read once and written once."""
    return 2 * case.k_cache.numel() * case.k_cache.element_size()


def flashinfer_runner(case: DecodeCase) -> Callable[[], torch.Tensor]:
    """FlashInfer's ``BatchDecodeWithPagedKVCacheWrapper`` over the case's pages (NHD
    layout: ``[num_pages, page_size, H_kv, D]``, the pool viewed page by page). This is
    FlashInfer's own paged API at the case's page size; SGLang's FlashInfer backend plans the
    same wrapper with page size 1 and one index per token instead.

    Raises:
        ImportError: flashinfer is not installed.
    """
    import flashinfer

    ps = case.page_size
    num_q_heads, (num_kv_heads, head_dim) = case.q.shape[1], case.k_cache.shape[1:]
    pages = case.page_table[case.req_pool_indices.long()]
    lens = case.seq_lens.long()
    num_pages = (lens + ps - 1) // ps
    keep = torch.arange(pages.shape[1], device=pages.device)[None, :] < num_pages[:, None]
    indptr = torch.cat([num_pages.new_zeros(1), num_pages.cumsum(0)]).to(torch.int32)
    last_page_len = ((lens - 1) % ps + 1).to(torch.int32)
    workspace = torch.empty(256 << 20, dtype=torch.uint8, device=case.q.device)
    wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD")
    wrapper.plan(indptr, pages[keep].to(torch.int32), last_page_len, num_q_heads,
                 num_kv_heads, head_dim, ps, q_data_type=case.q.dtype,
                 kv_data_type=case.k_cache.dtype)
    shape = (-1, ps, num_kv_heads, head_dim)
    kv = (case.k_cache.view(shape), case.v_cache.view(shape))
    return lambda: wrapper.run(case.q, kv)
