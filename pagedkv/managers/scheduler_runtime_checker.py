"""The scheduler's self-checks: the idle path's memory check, and every invariant.

Follows SGLang's ``python/sglang/srt/managers/scheduler_runtime_checker_mixin.py``
(``self_check_during_idle``, ``check_memory``, ``_check_radix_cache_memory``; 0.5.9) and
``scheduler.py: on_idle`` with ``scheduler_components/invariant_checker.py``
(``_check_full_pool``; 0.5.23). A mixin of :class:`~pagedkv.managers.scheduler.Scheduler`.
"""

from __future__ import annotations

from pagedkv.errors import PagedKVError
from pagedkv.managers.scheduler_state import SchedulerState
from pagedkv.mem_cache.allocator import ceil_to_page


class SchedulerRuntimeCheckerMixin(SchedulerState):
    """Idle housekeeping and checks (state lives on the scheduler)."""

    def on_idle(self) -> None:
        """Nothing to run: check memory and reset ``new_token_ratio`` (0.5.9: always; 0.5.23:
        only when nothing waits or runs); jump the clock to the next arrival.

        Raises:
            PagedKVError: waiting requests can never be admitted (nothing runs, nothing is
                due to arrive, admission refused them twice).
        """
        fully_idle = not self.waiting and not len(self.running) and self.chunked_req is None
        if not self.config.release.reset_ratio_only_when_idle or fully_idle:
            self.check_memory()
            self.ratio_tracker.reset()
        if self.waiting and not len(self.running):  # consecutive idle steps with a queue
            self._idle_blocked += 1
            if self._idle_blocked > 2:
                head = self.waiting[0]
                raise PagedKVError(f"stuck: request {head.rid} (prompt_len={head.prompt_len}, "
                                   f"max_new_tokens={head.max_new_tokens}) is refused by an "
                                   f"idle server with {self.allocator.available_size()} slots "
                                   "free; the pool is too small for it")
        self.jump_to_next_arrival()

    def jump_to_next_arrival(self) -> None:
        """Nothing ran and nothing waits: the clock moves on to the next arrival."""
        if not self.waiting and self._arrivals:
            self.clock = max(self.clock, self._arrivals[0][0])

    def check_memory(self) -> None:
        """SGLang's idle self-check: ``available + evictable + protected == pool`` (0.5.9
        ``_check_radix_cache_memory``, 0.5.23 ``_check_full_pool``) and no row held.

        Raises:
            PagedKVError: slots leaked or were counted twice.
        """
        free = self.allocator.available_size()
        tree = self.tree_cache.evictable_size() + self.tree_cache.protected_size()
        if free + tree != self.max_total_num_tokens:
            raise PagedKVError(f"memory leak: available {free} + tree {tree} != pool "
                               f"{self.max_total_num_tokens} while idle")
        held = self.req_to_token_pool.size - self.req_to_token_pool.available_size()
        if held:
            raise PagedKVError(f"memory leak: {held} request rows held while idle")

    def check_invariants(self) -> None:
        """Every slot accounted for, and the scheduler's own bookkeeping.

        ``available + evictable + protected + sum over live requests of (pages they hold
        beyond their locked prefix) == pool``; allocator, page table and tree consistent;
        each request waiting, running, pending, chunked or finished exactly once (in the
        overlap loop, a request left out of the decode batch while its last token is in
        flight holds its KV too).

        Raises:
            AssertionError / AllocatorError: when they do not hold.
        """
        self.allocator.check_invariants()
        self.req_to_token_pool.check_invariants()
        self.tree_cache.check_invariants()
        p, b = self.page_size, self.running
        b.sync()
        holders = [r for r, f in zip(b.reqs, b.finished.tolist(), strict=True) if not f]
        holders += [self.chunked_req] if self.chunked_req is not None else []
        if self.in_flight is not None:  # the overlap loop: left out of the batch, finishing
            held = {id(r) for r in holders}
            holders += [r for r in self.in_flight.batch.reqs
                        if r.req_pool_idx >= 0 and not r.finished and id(r) not in held]
        own = sum(int(ceil_to_page(r.kv_committed_len, p)) - r.cache_protected_len for r in holders)
        tree = self.tree_cache.evictable_size() + self.tree_cache.protected_size()
        free = self.allocator.available_size()
        assert free + tree + own == self.max_total_num_tokens, (free, tree, own)
        assert self.tokens_reserved >= 0
        self.ratio_tracker.check_invariants()
        queued = {r.rid for r in self.waiting}
        assert len(queued) == len(self.waiting)
        assert self.waiting_tokens == sum(r.fill_len for r in self.waiting)
        pending = len(self._arrivals) + sum(len(v) for v in self._followers.values())
        live = len(holders)
        assert len(self.waiting) + live + pending + self.num_finished == len(self.reqs), (
            len(self.waiting), live, pending, self.num_finished)
        assert len(holders) <= self.max_running_requests + 1
