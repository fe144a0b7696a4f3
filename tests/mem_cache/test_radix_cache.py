"""RadixCache over a request's life, by hand: what each release inserts, frees and locks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import torch

from pagedkv.mem_cache.allocator import PagedTokenToKVPoolAllocator, make_allocator
from pagedkv.mem_cache.memory_pool import ReqToTokenPool
from pagedkv.mem_cache.radix_cache import RadixCache


@dataclass(eq=False)
class R:
    """The request fields a cache reads (see ``CacheReq``)."""

    ids: list[int]
    origin_len: int
    req_pool_idx: int = -1
    kv_committed_len: int = 0
    cache_protected_len: int = 0
    prefix_len: int = 0
    last_node: Any = None
    extra: dict = field(default_factory=dict)

    def token_ids(self, end: int) -> np.ndarray:
        return np.asarray(self.ids[:end], dtype=np.int64)


def setup(version: str, p: int = 1, size: int = 64) -> RadixCache:
    return RadixCache.for_release(ReqToTokenPool(8, 64), make_allocator(size, p), version)


def prefill(cache: RadixCache, r: R, n: int) -> None:
    """Give ``r`` a row and slots for its first ``n`` tokens (no prefix), then cache them."""
    r.req_pool_idx = cache.req_to_token_pool.alloc(1)[0]
    slots = cache.allocator.alloc_extend([0], [n], [-1], n).numpy()
    cache.req_to_token_pool.req_to_token[r.req_pool_idx, :n] = torch.from_numpy(slots)
    r.kv_committed_len = n
    r.last_node = cache.root_node
    cache.cache_unfinished_req(r)


@pytest.mark.parametrize("version", ["0.5.23", "0.5.9"])
def test_second_request_frees_its_duplicates_and_reads_the_trees_slots(version: str) -> None:
    cache = setup(version)
    a, b = R([1, 2, 3, 4, 5], 5), R([1, 2, 3, 9, 9], 5)
    prefill(cache, a, 5)   # slots 1-5
    prefill(cache, b, 5)   # slots 6-10; 6-8 duplicate a's 1-3
    row_b = cache.req_to_token_pool.req_to_token[b.req_pool_idx, :5].tolist()
    assert row_b == [1, 2, 3, 9, 10]
    assert cache.allocator.free_pages.tolist()[-3:] == [6, 7, 8]  # page size 1: to the back
    assert (cache.protected_size(), cache.evictable_size()) == (7, 0)
    assert (b.cache_protected_len, b.prefix_len) == (5, 5)
    cache.check_invariants()


def test_0523_splits_the_finished_request_at_its_prompt() -> None:
    sizes = {}
    for version in ("0.5.23", "0.5.9"):
        cache = setup(version)
        a = R([1, 2, 3, 4, 5, 6, 7, 8], 5)  # prompt 5, then 3 outputs
        prefill(cache, a, 5)
        slots = cache.allocator.alloc_decode([6, 7, 8], [-1, -1, -1]).numpy()  # any 3 free
        cache.req_to_token_pool.req_to_token[a.req_pool_idx, 5:8] = torch.from_numpy(slots)
        a.kv_committed_len = 8
        cache.cache_finished_req(a)
        sizes[version] = sorted(len(n.key) for n in cache.nodes() if n is not cache.root_node)
        assert cache.evictable_size() == 8 and cache.protected_size() == 0
        cache.check_invariants()
    # 0.5.9: the prompt node (5) gains one child (3); 0.5.23 also: the prompt was inserted
    # first at prefill, so the same two nodes. A retracted request's re-prefill is where they
    # differ (prompt + output in one insert): see the next test.
    assert sizes["0.5.23"] == sizes["0.5.9"] == [3, 5]


def test_0523_splits_a_reprefill_at_the_prompt_boundary() -> None:
    sizes = {}
    for version in ("0.5.23", "0.5.9"):
        cache = setup(version)
        a = R([1, 2, 3, 4, 5, 6, 7, 8], 5)
        prefill(cache, a, 8)  # a re-prefill over prompt + 3 outputs, all new to the tree
        sizes[version] = sorted(len(n.key) for n in cache.nodes() if n is not cache.root_node)
        cache.check_invariants()
    assert sizes == {"0.5.23": [3, 5], "0.5.9": [8]}


@pytest.mark.parametrize("version", ["0.5.23", "0.5.9"])
def test_retraction_keeps_the_cached_prompt_and_frees_the_rest(version: str) -> None:
    cache = setup(version, p=4, size=64)
    a = R(list(range(1, 15)), 10)
    prefill(cache, a, 10)  # 8 tokens cached (2 pages), 2 in a partial page
    assert (a.cache_protected_len, a.prefix_len) == (8, 10)
    a.kv_committed_len = 14  # 4 more decoded: pages 3 (tokens 8-11) and 4 (12-13)
    extra = cache.allocator.alloc_extend([10], [14], [int(cache._table[a.req_pool_idx, 9])], 4)
    cache._table[a.req_pool_idx, 10:14] = extra.numpy()
    free_before = cache.allocator.available_size()
    cache.cache_finished_req(a, is_insert=False)
    assert cache.evictable_size() == 8 and cache.protected_size() == 0
    assert cache.allocator.available_size() == free_before + 8  # its 2 own pages
    cache.check_invariants()


def test_paged_duplicates_come_back_node_by_node_in_0523() -> None:
    # R3 overlaps two nodes (its pages 3 and 5 duplicate them); outside a free group 0.5.23 frees
    # each node's pages as it walks (the later one ends in front), 0.5.9 in one sorted call
    heads = {}
    for version in ("0.5.23", "0.5.9"):
        cache = RadixCache.for_release(ReqToTokenPool(8, 64), PagedTokenToKVPoolAllocator(64, 2), version)
        prefill(cache, R([1, 2, 3, 4], 4), 4)             # pages 1-2, one node
        prefill(cache, R([1, 2, 7, 7], 4), 4)             # splits it: [1,2] | [3,4]
        prefill(cache, R([1, 2, 3, 4, 5, 5], 6), 6)       # overlaps both nodes
        heads[version] = cache.allocator.free_pages.tolist()[:3]
    assert heads["0.5.9"] == [3, 5, 7]
    assert heads["0.5.23"] == [5, 3, 7]
