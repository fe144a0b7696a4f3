"""SchedulerPoolStatsObserver alone: SGLang's #token and token usage (evictable counted as
free), the tokens live requests hold, and admission's reservation over live requests only."""

from __future__ import annotations

import numpy as np
import pytest

from pagedkv.managers.config import SchedulerConfig
from pagedkv.managers.req import Req
from pagedkv.managers.schedule_batch import ScheduleBatch
from pagedkv.managers.scheduler_components import (
    NewTokenRatioTracker,
    SchedulerPoolStatsObserver,
)
from pagedkv.mem_cache.allocator import make_allocator
from pagedkv.mem_cache.memory_pool import ReqToTokenPool
from pagedkv.mem_cache.radix_cache import RadixCache
from pagedkv.workloads.synthetic import RequestSpec


def setup() -> tuple[SchedulerPoolStatsObserver, ScheduleBatch, RadixCache]:
    """A 100-slot pool (page 1), two running requests (6 and 9 tokens of KV), ratio 0.5."""
    alloc = make_allocator(100, 1)
    pool = ReqToTokenPool.for_release(4, 64, "0.5.23")
    tree = RadixCache.for_release(pool, alloc, "0.5.23")
    cfg = SchedulerConfig()
    ratio = NewTokenRatioTracker.from_config(cfg)
    ratio.current = 0.5
    obs = SchedulerPoolStatsObserver(config=cfg, page_size=1, max_total_num_tokens=100,
                                     token_to_kv_pool_allocator=alloc, tree_cache=tree,
                                     ratio_tracker=ratio)
    batch = ScheduleBatch(pool, alloc, tree)
    reqs = []
    for i, (prompt, gen, most) in enumerate([(5, 2, 10), (8, 2, 30)]):
        r = Req.from_spec(i, RequestSpec(prompt, most, most))
        r.req_pool_idx, r.generated, r.kv_committed_len = pool.alloc(1)[0], gen, prompt + gen - 1
        pool.req_to_token.numpy()[r.req_pool_idx, :r.kv_committed_len] = alloc.alloc(
            r.kv_committed_len).numpy()
        reqs.append(r)
    batch.merge_batch(reqs)
    return obs, batch, tree


def test_tokens_in_use_leave_out_evictable_cached_tokens() -> None:
    obs, _, tree = setup()
    assert obs.tokens_in_use() == 15 and obs.token_usage() == pytest.approx(0.15)
    slots = obs.token_to_kv_pool_allocator.alloc(4)
    tree.insert(np.arange(4, dtype=np.int64) + 1000, slots.numpy().astype(np.int64))
    assert tree.evictable_size() == 4 and obs.tokens_in_use() == 15  # cached: free to SGLang


def test_tokens_used_count_live_requests_and_the_chunked_one() -> None:
    obs, batch, _ = setup()
    assert obs.tokens_used(batch, None) == 15
    chunked = Req.from_spec(9, RequestSpec(20, 1, 1))
    chunked.kv_committed_len = 7
    assert obs.tokens_used(batch, chunked) == 22
    batch.finished[0] = True  # released, still in the batch (0.5.9 until the next step)
    assert obs.tokens_used(batch, None) == 9


def test_the_reservation_is_remaining_tokens_times_the_ratio_over_live_requests() -> None:
    obs, batch, _ = setup()
    assert obs.tokens_reserved(batch) == pytest.approx((10 - 2) * 0.5 + (30 - 2) * 0.5)
    batch.finished[1] = True
    assert obs.tokens_reserved(batch) == pytest.approx((10 - 2) * 0.5)
