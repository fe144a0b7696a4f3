"""The scheduler's self-checks: the idle memory check and every invariant of a step.

Follows SGLang 0.5.23's ``managers/scheduler_components/invariant_checker.py``
(``SchedulerInvariantChecker``: ``_check_full_pool`` and ``_check_req_pool``, run by
``Scheduler.on_idle``; its ``get_running_batch`` / ``get_chunked_req`` callables, since the
scheduler replaces both) and 0.5.9's ``scheduler_runtime_checker_mixin.py``
(``self_check_during_idle``, ``check_memory``, ``_check_radix_cache_memory``): the same
check, ``available + evictable + protected == pool`` with no request row held.
:meth:`SchedulerInvariantChecker.check_invariants` goes further than SGLang, for tests: every
slot is accounted for in the middle of a run too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import cast

from pagedkv.errors import PagedKVError
from pagedkv.managers.req import Req
from pagedkv.managers.schedule_batch import ScheduleBatch
from pagedkv.managers.scheduler_components.new_token_ratio_tracker import NewTokenRatioTracker
from pagedkv.managers.scheduler_components.waiting_queue import WaitingQueue
from pagedkv.mem_cache.allocator import BaseTokenToKVPoolAllocator, ceil_to_page
from pagedkv.mem_cache.allocator.swa import SWATokenToKVPoolAllocator
from pagedkv.mem_cache.chunk_cache import ChunkCache
from pagedkv.mem_cache.mamba_cache import MambaPrefixCache
from pagedkv.mem_cache.mamba_pool import HybridReqToTokenPool
from pagedkv.mem_cache.memory_pool import ReqToTokenPool
from pagedkv.mem_cache.radix_cache import RadixCache
from pagedkv.mem_cache.swa_cache import SWAPrefixCache


@dataclass(slots=True, kw_only=True)
class SchedulerInvariantChecker:
    """Checks a scheduler's pools, tree and queues.

    Attributes:
        page_size, max_total_num_tokens: the pool's page size and slots.
        max_running_requests: the running batch's size limit.
        token_to_kv_pool_allocator, req_to_token_pool, tree_cache: the pools and the tree.
        waiting: the waiting queue (and the requests still to arrive).
        ratio_tracker: ``new_token_ratio``.
        get_running_batch: the running batch now.
        get_chunked_req: the request being chunked now (None: none).
        get_num_finished: requests finished so far.
        get_in_flight_reqs: the requests of the batch in flight (the overlap loop; none in
            the normal loop): one left out of the running batch while its last token is in
            flight still holds its KV.
    """

    page_size: int
    max_total_num_tokens: int
    max_running_requests: int
    token_to_kv_pool_allocator: BaseTokenToKVPoolAllocator
    req_to_token_pool: ReqToTokenPool
    tree_cache: RadixCache | ChunkCache
    waiting: WaitingQueue
    ratio_tracker: NewTokenRatioTracker
    get_running_batch: Callable[[], ScheduleBatch]
    get_chunked_req: Callable[[], Req | None]
    get_num_finished: Callable[[], int]
    get_in_flight_reqs: Callable[[], Sequence[Req]] = field(default=lambda: ())

    def check_memory(self) -> None:
        """The idle check: ``available + evictable + protected == pool`` (0.5.9
        ``_check_radix_cache_memory``, 0.5.23 ``_check_full_pool``; on a sliding-window
        hybrid the full pool's, and the same for the SWA pool, ``_check_swa_pool``) and no
        row held (``_check_req_pool``).

        Raises:
            PagedKVError: slots leaked or were counted twice; a row is held.
        """
        free = self.token_to_kv_pool_allocator.full_available_size()
        tree = self.tree_cache.evictable_size() + self.tree_cache.protected_size()
        if free + tree != self.max_total_num_tokens:
            raise PagedKVError(f"memory leak: available {free} + tree {tree} != pool "
                               f"{self.max_total_num_tokens} while idle")
        alloc = self.token_to_kv_pool_allocator
        if isinstance(alloc, SWATokenToKVPoolAllocator):  # a hybrid (_check_swa_pool)
            tree = cast(SWAPrefixCache, self.tree_cache)
            swa = alloc.swa_available_size() + tree.swa_evictable_size() + tree.swa_protected_size()
            if swa != alloc.size_swa:
                raise PagedKVError(f"memory leak: SWA available + tree {swa} != SWA pool "
                                   f"{alloc.size_swa} while idle")
        held = self.req_to_token_pool.size - self.req_to_token_pool.available_size()
        if held:
            raise PagedKVError(f"memory leak: {held} request rows held while idle")
        pool = self.req_to_token_pool
        if isinstance(pool, HybridReqToTokenPool):
            held = pool.mamba_pool.size - pool.mamba_allocator.available_size()
            if isinstance(self.tree_cache, MambaPrefixCache):  # states the tree keeps
                held -= self.tree_cache.mamba_evictable_size() + self.tree_cache.mamba_protected_size()
            if held:
                raise PagedKVError(f"memory leak: {held} state slots held while idle")

    def check_not_stuck(self, idle_blocked: int) -> None:
        """pagedkv's own check (SGLang would wait forever): after ``idle_blocked`` idle
        steps in a row with requests waiting and none running, the head of the queue can
        never be admitted once there are 3.

        Raises:
            PagedKVError: ``idle_blocked > 2``; it names the request, its sizes and the
                free slots.
        """
        if idle_blocked > 2 and self.waiting:
            head = self.waiting[0]
            raise PagedKVError(f"stuck: request {head.rid} (prompt_len={head.prompt_len}, "
                               f"max_new_tokens={head.max_new_tokens}) is refused by an "
                               f"idle server with {self.token_to_kv_pool_allocator.available_size()}"
                               " slots free; the pool is too small for it")

    def holders(self) -> list[Req]:
        """Requests holding a row: the running batch's live ones, a chunked request, then
        in-flight requests left out of the batch (SGLang ``_requests_owning_rows``)."""
        b = self.get_running_batch()
        b.sync()
        reqs = [r for r, f in zip(b.reqs, b.finished.tolist(), strict=True) if not f]
        chunked = self.get_chunked_req()
        if chunked is not None:
            reqs.append(chunked)
        flying = self.get_in_flight_reqs()
        if flying:  # the overlap loop: left out of the batch, finishing
            held = {id(r) for r in reqs}
            reqs += [r for r in flying if r.req_pool_idx >= 0 and not r.finished
                     and id(r) not in held]
        return reqs

    def check_invariants(self, tokens_reserved: float) -> None:
        """Every slot accounted for, and the scheduler's own bookkeeping.

        ``available + evictable + protected + sum over live requests of (pages they hold
        beyond their locked prefix) == pool``; allocator, page table and tree consistent;
        each request waiting, running, pending, chunked or finished exactly once; on a
        linear-attention hybrid, each live request holds its own state slot and no other is
        held;
        ``tokens_reserved`` (what admission holds back now) not negative.

        Raises:
            AssertionError / AllocatorError: when they do not hold.
        """
        self.token_to_kv_pool_allocator.check_invariants()
        self.req_to_token_pool.check_invariants()
        self.tree_cache.check_invariants()
        p = self.page_size
        holders = self.holders()
        own = sum(int(ceil_to_page(r.kv_committed_len, p)) - r.cache_protected_len for r in holders)
        tree = self.tree_cache.evictable_size() + self.tree_cache.protected_size()
        free = self.token_to_kv_pool_allocator.full_available_size()
        assert free + tree + own == self.max_total_num_tokens, (free, tree, own)
        assert tokens_reserved >= 0
        self.ratio_tracker.check_invariants()
        self.waiting.check_invariants()
        waiting, pending = len(self.waiting), self.waiting.num_pending()
        finished = self.get_num_finished()
        assert waiting + len(holders) + pending + finished == len(self.waiting.reqs), (
            waiting, len(holders), pending, finished)
        assert len(holders) <= self.max_running_requests + 1
        pool = self.req_to_token_pool
        if isinstance(pool, HybridReqToTokenPool):  # one state slot per row holder, no other
            slots = {r.mamba_pool_idx for r in holders}
            in_use = pool.mamba_pool.size - pool.mamba_allocator.available_size()
            if isinstance(self.tree_cache, MambaPrefixCache):  # and its track slots, the tree's
                tree = self.tree_cache
                track = [s for r in holders for s in r.mamba_ping_pong_track_buffer or () if s >= 0]
                in_use -= (len(track) + tree.mamba_evictable_size() + tree.mamba_protected_size())
                slots.update(track)
                assert len(slots) == len(holders) + len(track), (sorted(slots), len(holders))
                slots -= set(track)
            assert -1 not in slots and len(slots) == len(holders) == in_use, (
                sorted(slots), len(holders), in_use)
