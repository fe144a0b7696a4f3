"""SchedulerInvariantChecker alone: the idle memory check and the whole-state invariant, on
pools built by hand (no scheduler), each broken on purpose once."""

from __future__ import annotations

import pytest

from pagedkv.errors import PagedKVError
from pagedkv.managers.config import SchedulerConfig
from pagedkv.managers.req import Req
from pagedkv.managers.schedule_batch import ScheduleBatch
from pagedkv.managers.scheduler import Scheduler
from pagedkv.managers.scheduler_components import (
    NewTokenRatioTracker,
    SchedulerInvariantChecker,
    WaitingQueue,
)
from pagedkv.mem_cache.allocator import make_allocator
from pagedkv.mem_cache.memory_pool import ReqToTokenPool
from pagedkv.mem_cache.radix_cache import RadixCache
from pagedkv.workloads.synthetic import RequestSpec


def checker(num_reqs: int = 2, finished: int = 0) -> SchedulerInvariantChecker:
    """A checker over an empty 64-slot pool (page 4), ``num_reqs`` requests not yet arrived."""
    alloc = make_allocator(64, 4)
    pool = ReqToTokenPool.for_release(4, 64, "0.5.23")
    tree = RadixCache.for_release(pool, alloc, "0.5.23")
    running = ScheduleBatch(pool, alloc, tree)
    reqs = [Req.from_spec(i, RequestSpec(5, 2, 4, 1.0)) for i in range(num_reqs)]
    return SchedulerInvariantChecker(
        page_size=4, max_total_num_tokens=64, max_running_requests=3,
        token_to_kv_pool_allocator=alloc, req_to_token_pool=pool, tree_cache=tree,
        waiting=WaitingQueue.from_reqs(reqs),
        ratio_tracker=NewTokenRatioTracker.from_config(SchedulerConfig()),
        get_running_batch=lambda: running, get_chunked_req=lambda: None,
        get_num_finished=lambda: finished)


def test_an_idle_empty_pool_passes() -> None:
    c = checker()
    c.check_memory()
    c.check_invariants(tokens_reserved=0.0)
    assert c.holders() == []


def test_a_leaked_slot_is_reported() -> None:
    c = checker()
    c.token_to_kv_pool_allocator.alloc(4)  # held by nobody
    with pytest.raises(PagedKVError, match=r"memory leak: available 60 \+ tree 0 != pool 64"):
        c.check_memory()
    with pytest.raises(AssertionError):
        c.check_invariants(tokens_reserved=0.0)


def test_a_held_row_is_reported_while_idle() -> None:
    c = checker()
    c.req_to_token_pool.alloc(1)
    with pytest.raises(PagedKVError, match="1 request rows held while idle"):
        c.check_memory()


def test_every_request_is_counted_once() -> None:
    with pytest.raises(AssertionError):  # two requests pending and one finished: three of two
        checker(num_reqs=2, finished=1).check_invariants(tokens_reserved=0.0)
    with pytest.raises(AssertionError):
        checker().check_invariants(tokens_reserved=-1.0)


@pytest.mark.parametrize("disable_overlap_schedule", [True, False])
def test_the_schedulers_checker_holds_through_a_run(disable_overlap_schedule: bool) -> None:
    """The holders are the running batch's live requests and the chunked one, then (overlap
    loop only) a prefill's requests, which hold rows before they join the batch: exactly the
    requests holding a row."""
    specs = [RequestSpec(30, 20, 20, 0.0) for _ in range(6)]
    s = Scheduler(specs, max_total_num_tokens=128, page_size=4,
                  config=SchedulerConfig(chunked_prefill_size=16,
                                         disable_overlap_schedule=disable_overlap_schedule))
    assert s.invariant_checker.get_running_batch() is s.running
    outside = 0
    while s.step():
        s.check_invariants()
        holders = s.invariant_checker.holders()
        live = ([r for r in s.running.reqs if not r.finished]
                + ([s.chunked_req] if s.chunked_req is not None else []))
        assert holders[:len(live)] == live
        assert sorted(r.rid for r in holders) == sorted(r.rid for r in s.reqs if r.req_pool_idx >= 0)
        outside += len(holders) - len(live)
    assert (outside > 0) == (not disable_overlap_schedule)
    s.check_memory()
