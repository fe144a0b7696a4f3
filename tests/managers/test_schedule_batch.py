"""The running batch on real memory, by hand: the decode memory check and ``retract_decode``
(victim order, survivors' order, the new ratio, the KV given back, the tree's part), a
prefill pass's slots (``prepare_for_extend``) and the decode pass handed to the executor."""

from __future__ import annotations

import numpy as np
import pytest

from pagedkv.errors import OutOfMemoryError
from pagedkv.lessons.examples import running_batch
from pagedkv.managers import Req, SchedulerConfig
from pagedkv.managers.retract_decode import retract_ratio
from pagedkv.managers.schedule_batch import ScheduleBatch
from pagedkv.mem_cache.allocator import make_allocator
from pagedkv.mem_cache.chunk_cache import ChunkCache
from pagedkv.mem_cache.common import release_kv_cache
from pagedkv.mem_cache.memory_pool import ReqToTokenPool
from pagedkv.workloads.synthetic import RequestSpec


def rids(reqs: list[Req]) -> list[int]:
    return [r.rid for r in reqs]


def test_retraction_order_fewest_outputs_then_longest_prompt_then_later_index() -> None:
    b = running_batch([10, 20, 30, 5, 30], [5, 3, 3, 8, 3], [50] * 5, free=10)
    # popped from the end: outputs 3 (prompts 30, 20, 30: the later 30 first), then 5, then 8
    order = b.retraction_order()
    assert order[::-1] == [4, 2, 1, 0, 3]


def test_retract_decode_stops_when_the_rest_fits() -> None:
    b = running_batch([10, 20, 30, 5], [5, 3, 3, 8], [50, 50, 60, 70], free=1)
    # page 1: the next step needs 4 slots, 1 free. Retract #2 (kv 30 + 3 - 1 = 32): 33 free.
    retracted, ratio, aborted = b.retract_decode()
    assert rids(retracted) == [2] and not aborted
    # the survivors stay in sorted order (most outputs first): 3, 0, 1
    assert rids(b.reqs) == [3, 0, 1]
    # ratio over the 3 that stay: (5 + 3 + 8 + 20 * 3) / (50 + 50 + 70 + 1) = 76 / 171
    assert ratio == pytest.approx(76 / 171)
    assert b.allocator.available_size() == 33
    assert retracted[0].req_pool_idx == -1 and retracted[0].generated == 3


def test_retract_decode_retracts_at_least_one_and_counts_pages() -> None:
    b = running_batch([16, 16], [1, 2], [50, 50], free=0, page_size=4)
    # page 4: kv 16 and 17; only kv 16 starts a new page -> 4 slots needed, 0 free.
    assert b.new_tokens_required_next_decode() == 4 and not b.check_decode_mem()
    retracted, ratio, _ = b.retract_decode()
    # victim: request 0 (1 output); it frees ceil4(16) = 16 slots; request 1 needs none
    assert rids(retracted) == [0] and rids(b.reqs) == [1]
    assert ratio == pytest.approx((2 + 20) / 51)
    assert b.allocator.available_size() == 16


def test_exact_ties_retract_the_later_request() -> None:
    b = running_batch([2] * 5, [1] * 5, [100] * 5, free=0)
    retracted, ratio, _ = b.retract_decode()
    # each frees 2 slots; 5, then 4 needed: two victims, the last two of the batch
    assert rids(retracted) == [4, 3] and rids(b.reqs) == [0, 1, 2]
    assert ratio == pytest.approx((3 + 60) / 301)


@pytest.mark.parametrize("version", ["0.5.9", "0.5.23"])
def test_one_request_that_cannot_decode(version: str) -> None:
    cfg = SchedulerConfig(sglang_version=version)
    b = running_batch([8], [1], [50], free=0, page_size=4, config=cfg)
    if version == "0.5.9":
        with pytest.raises(OutOfMemoryError, match="even after retracting"):
            b.retract_decode(abort_last_request=cfg.release.abort_last_request)
        return
    retracted, ratio, aborted = b.retract_decode(abort_last_request=cfg.release.abort_last_request)
    assert not retracted and rids(aborted) == [0] and len(b) == 0
    assert b.allocator.available_size() == 8 and ratio == 0.0


def test_retraction_keeps_the_prompt_in_the_tree() -> None:
    # radix cache on: the victim's prompt, cached at prefill, stays (now evictable); its own
    # tokens after the prompt are freed. The tree is then asked for remaining * 20 slots.
    b = running_batch([40, 40], [10, 30], [100, 100], free=0, page_size=1)
    tree = b.tree_cache
    assert tree.evictable_size() == 0
    b.sync()
    victim = b.reqs[0]
    # give the victim's prompt to a radix cache first, as its prefill would have
    from pagedkv.mem_cache.radix_cache import RadixCache

    radix = RadixCache(b.req_to_token_pool, b.allocator)
    b.tree_cache = radix
    victim.kv_committed_len = 40
    radix.cache_unfinished_req(victim)
    victim.kv_committed_len = 49
    assert radix.protected_size() == 40 and victim.cache_protected_len == 40
    release_kv_cache(victim, radix, b.req_to_token_pool, is_insert=False)
    assert radix.evictable_size() == 40 and radix.protected_size() == 0
    assert b.allocator.available_size() == 9  # only the 9 tokens after the prompt
    assert np.all(radix.match_prefix(victim.token_ids(40)).device_indices >= 1)


def test_retract_ratio_formula() -> None:
    assert retract_ratio([5, 3, 8], [50, 50, 70], 20) == pytest.approx(76 / 171)
    assert retract_ratio([100], [100], 20) == 1.0  # capped at 1
    assert retract_ratio([], [], 20) == 0.0


def test_prepare_for_extend_gives_rows_prefix_slots_and_extend_slots() -> None:
    alloc = make_allocator(64, 4)
    pool = ReqToTokenPool.for_release(4, 32, "0.5.23")
    cache = ChunkCache.for_release(pool, alloc, "0.5.23")
    a, b = (Req.from_spec(i, RequestSpec(n, 2, 2)) for i, n in enumerate((6, 9)))
    a.prefix_len, a.extend_len, a._prefix_slots = 0, 6, np.empty(0, dtype=np.int64)
    b.prefix_len, b.extend_len, b._prefix_slots = 0, 4, np.empty(0, dtype=np.int64)  # a chunk
    fb = ScheduleBatch.init_new([a, b], pool, alloc, cache).prepare_for_extend(chunked_req=b)
    table = pool.req_to_token.numpy()
    assert fb.mode == "extend" and fb.sample.tolist() == [True, False]
    assert (a.req_pool_idx, b.req_pool_idx) == tuple(fb.req_pool_indices.tolist())
    # one call for the pass, as SGLang 0.5.23's alloc_req_slots: the last two of the free
    # list [1, 2, 3, 4] in list order (one call per request would give a 4 and b 3)
    assert (a.req_pool_idx, b.req_pool_idx) == (3, 4)
    assert (a.kv_committed_len, b.kv_committed_len) == (6, 4) and a._prefix_slots is None
    assert fb.extend_lens.tolist() == [6, 4] and len(fb.out_cache_loc) == 10
    assert table[a.req_pool_idx, :6].tolist() == fb.out_cache_loc[:6].tolist()
    assert table[b.req_pool_idx, :4].tolist() == fb.out_cache_loc[6:].tolist()
    assert alloc.available_size() == 64 - 8 - 4  # pages of 4: 2 for a, 1 for b
    b.prefix_len, b.extend_len = 4, 5  # its next chunk keeps its row and its page
    row = b.req_pool_idx
    fb2 = ScheduleBatch.init_new([b], pool, alloc, cache).prepare_for_extend(chunked_req=None)
    assert b.req_pool_idx == row and fb2.prefix_lens.tolist() == [4] and fb2.kv_tokens == 4
    assert table[row, 4:9].tolist() == fb2.out_cache_loc.tolist() and b.kv_committed_len == 9


def test_get_model_worker_batch_is_the_decode_just_prepared() -> None:
    b = running_batch([10, 20], [3, 5], [50, 50], free=10)
    kv = b.kv_len.tolist()
    b.prepare_for_decode()
    fb = b.get_model_worker_batch(np.array([7, 8]))
    assert fb.mode == "decode" and fb.prefix_lens.tolist() == kv and fb.kv_tokens == sum(kv)
    assert fb.extend_lens.tolist() == [1, 1] and fb.out_cache_loc.tolist() == b.last_loc.tolist()
    assert fb.input_ids is not None and fb.input_ids.tolist() == [7, 8]
    b.last_loc[0] = -5  # the pass keeps its own copy
    assert fb.out_cache_loc[0] != -5 and fb.reqs is not b.reqs


def test_live_index_finds_the_unfinished_request_holding_each_row() -> None:
    b = running_batch([4, 5, 6], [1, 1, 1], [9, 9, 9], free=10)
    rows = b.req_pool_idx.tolist()
    b.finished[1] = True  # a finished request's row is free (or another's): not found
    spare = next(r for r in range(b.table.shape[0]) if r not in rows)
    got = b.live_index(np.array([rows[2], rows[1], spare, rows[0]], dtype=np.int64))
    assert got.tolist() == [2, -1, -1, 0]
