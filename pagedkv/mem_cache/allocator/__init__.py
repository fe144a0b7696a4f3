"""Token-to-KV-slot allocators: which physical KV slots hold which request's tokens.

A package as in SGLang 0.5.23 (``mem_cache/allocator/``): ``base`` (the free list, ``free``,
``free_page_ids``, free groups), ``ownership`` (page arithmetic, pagedkv's per-slot record and
its misuse checks), ``paged`` (``alloc_extend``, ``alloc_decode``), ``token`` (page size 1) and
``swa`` (the full and sliding-window pools of a sliding-window hybrid) and ``mamba`` (the state
slots of a linear-attention hybrid: one per request, not per token).
"""

from pagedkv.mem_cache.allocator.base import BaseTokenToKVPoolAllocator
from pagedkv.mem_cache.allocator.mamba import MambaSlotAllocator
from pagedkv.mem_cache.allocator.ownership import (
    FREED,
    IN_USE,
    NEVER,
    IntsLike,
    as_i64,
    ceil_to_page,
    decode_need,
)
from pagedkv.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator
from pagedkv.mem_cache.allocator.swa import SWATokenToKVPoolAllocator
from pagedkv.mem_cache.allocator.token import TokenToKVPoolAllocator


def make_allocator(size: int, page_size: int) -> BaseTokenToKVPoolAllocator:
    """The allocator SGLang builds for ``page_size``: the token allocator for 1, else paged."""
    return TokenToKVPoolAllocator(size) if page_size == 1 else PagedTokenToKVPoolAllocator(size, page_size)


__all__ = [
    "FREED",
    "IN_USE",
    "NEVER",
    "BaseTokenToKVPoolAllocator",
    "IntsLike",
    "MambaSlotAllocator",
    "PagedTokenToKVPoolAllocator",
    "SWATokenToKVPoolAllocator",
    "TokenToKVPoolAllocator",
    "as_i64",
    "ceil_to_page",
    "decode_need",
    "make_allocator",
]
