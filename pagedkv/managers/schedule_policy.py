"""Admission: SGLang's ``PrefillAdder`` (``python/sglang/srt/managers/schedule_policy.py``).

One prefill pass walks the waiting queue and asks, per request, whether the pool can take
it *and* what it will still write. The memory budget is

    rem_total_tokens = available_size + evictable - sum(reservations) - sum(charges so far)

where ``evictable`` is the radix cache's unlocked tokens (free on demand), each running
request reserves ``min(max_new_tokens - generated, CLIP) * new_token_ratio`` and each
admitted request is charged ``ceil_to_page(extend) + min(max_new_tokens, CLIP)``. A newcomer
is refused (``NO_TOKEN``) when ``extend + min(max_new_tokens - generated, CLIP) >=
rem_total_tokens``; ``extend`` leaves out its cached prefix, and locking that prefix (it stops
being evictable) happens before the test is final. The per-pass prompt budget
``max_prefill_tokens`` and the chunk budget ``chunked_prefill_size`` end the pass with
``OTHER``.

SGLang 0.5.23 (the default) differs from 0.5.9: every admitted piece costs one more page on
both memory budgets and in the newcomer test; a running ignore-EOS request reserves at ratio
1.0; ``max_prefill_tokens`` refuses a later request whose page-rounded prompt would reach or
cross what is left of it (``>=``, as in both releases) only without chunked prefill (with it,
the pass ends after the request that reaches or crosses it), and only after locking;
a new request's chunk ends on a page boundary of its whole sequence; ``#new-token`` counts
raw tokens. With the radix cache off, ignore-EOS requests take
:meth:`PrefillAdder.add_one_req_ignore_eos` (a worst-case simulation of the batch), as in SGLang.

On a sliding-window hybrid (0.5.23) the memory budgets are the full pool's (its free and
evictable full slots) and a third budget is the SWA pool's (:class:`SWAPrefillBudget`: what
each request's window can hold at once); a newcomer the SWA room cannot take waits, or is
chunked to that room, and a carried chunk without SWA room waits ("parked": not in the pass).

Besides SGLang's rule (``sglang``), two teaching policies (see
:class:`~pagedkv.managers.config.Policy`) change the reservation and the charge. What the
running batch reserves, and the ignore-EOS worst case, are :mod:`pagedkv.managers.reservation`.

Where we simplify: no hierarchical cache, no priority preemption, no mixed chunked prefill,
no speculative decoding, no ``prefill_max_requests``.
"""

from __future__ import annotations

from enum import Enum

from pagedkv.managers.config import Policy, SchedulerConfig
from pagedkv.managers.req import Req
from pagedkv.managers.reservation import (
    footprint,
    ignore_eos_states,
    ignore_eos_worst_case_fits,
    running_reservation,
)
from pagedkv.managers.schedule_batch import ScheduleBatch
from pagedkv.mem_cache.allocator import BaseTokenToKVPoolAllocator, ceil_to_page
from pagedkv.mem_cache.base_prefix_cache import BasePrefixCache
from pagedkv.mem_cache.swa_cache import SWAPrefixCache
from pagedkv.mem_cache.swa_prefill_budget import SWAPrefillBudget


class AddReqResult(Enum):
    """SGLang's ``AddReqResult``: go on, stop for memory, or stop for another budget."""

    CONTINUE = "continue"
    NO_TOKEN = "no_token"
    OTHER = "other"


class PrefillAdder:
    """Budgets for one prefill pass (SGLang ``PrefillAdder``).

    Args:
        config: constants, policy and release.
        tree_cache: the prefix cache (its evictable tokens count as room; admission locks).
        allocator: the pool's allocator (its ``available_size``, read live).
        running: the running batch (its reservation), or None.
        new_token_ratio: the scheduler's current ratio.

    Attributes:
        rem_total_token_offset: reservations plus charges so far (tokens, may be fractional).
        cur_rem_token_offset: prompt tokens charged so far.
        rem_input_tokens: what is left of ``max_prefill_tokens``.
        rem_chunk_tokens: what is left of ``chunked_prefill_size`` (None: no chunking).
        can_run_list: the admitted requests, in order; each one's ``extend_len`` is set.
        charges: what each admitted request was charged on ``rem_total_tokens`` (tokens).
        new_chunked_req: the new request whose prompt was cut this pass, if any (a carried
            chunk that is still not done is returned by :meth:`add_chunked_req` instead).
        log_hit_tokens, log_input_tokens: the prefill log's ``#cached-token`` and
            ``#new-token``.
    """

    def __init__(self, config: SchedulerConfig, tree_cache: BasePrefixCache,
                 allocator: BaseTokenToKVPoolAllocator, running: ScheduleBatch | None,
                 new_token_ratio: float) -> None:
        self.config, self.tree_cache, self.allocator = config, tree_cache, allocator
        self.page_size = p = allocator.page_size
        self.release = release = config.release
        self.overhead = p if release.extra_page_per_request else 0  # per_req_token_overhead
        self.running = running
        self.new_token_ratio = new_token_ratio
        self.rem_input_tokens = config.max_prefill_tokens
        self.rem_chunk_tokens = config.chunked_prefill_size
        self.rem_total_token_offset = 0.0
        self.cur_rem_token_offset = 0
        if running is not None and len(running):
            b = running
            self.rem_total_token_offset += running_reservation(
                config, p, new_token_ratio, b.prompt_len, b.max_new_tokens, b.generated,
                b.kv_len, b.ignore_eos)
        self.can_run_list: list[Req] = []
        self.charges: list[float] = []
        self.new_chunked_req: Req | None = None
        self.log_hit_tokens = self.log_input_tokens = 0
        self.req_states: list[tuple[float, int]] | None = None
        # a sliding-window hybrid: the SWA budget, its total offset kept equal to ours
        self.swa: SWAPrefillBudget | None = None
        if isinstance(tree_cache, SWAPrefixCache):
            self.swa = SWAPrefillBudget(allocator, tree_cache)  # type: ignore[arg-type]
            self.swa.total_offset = self.rem_total_token_offset

    def _room(self) -> int:
        """Free plus evictable slots (a sliding-window hybrid: the full pool's)."""
        return self.allocator.full_available_size() + self.tree_cache.evictable_size()

    @property
    def rem_total_tokens(self) -> float:
        """``available_size + evictable - rem_total_token_offset``."""
        return self._room() - self.rem_total_token_offset

    @property
    def cur_rem_tokens(self) -> int:
        """``available_size + evictable - cur_rem_token_offset``: room for prompts alone."""
        return self._room() - self.cur_rem_token_offset

    def _swa_new_tokens(self, req: Req) -> int:
        """What ``req`` may still decode, for its window's headroom (``_swa_new_tokens``)."""
        return min(max(req.max_new_tokens - req.generated, 0), self.config.clip_max_new_tokens)

    def budget_state(self) -> AddReqResult:
        """NO_TOKEN when memory is spent, OTHER when the prompt or chunk budget is."""
        if (self.rem_total_tokens <= 0 or self.cur_rem_tokens <= 0
                or (self.swa is not None and self.swa.remaining_swa <= 0)):
            return AddReqResult.NO_TOKEN
        if self.rem_input_tokens <= 0 or (self.rem_chunk_tokens is not None
                                          and self.rem_chunk_tokens <= 0):
            return AddReqResult.OTHER
        return AddReqResult.CONTINUE

    # ----- charging ---------------------------------------------------------------------
    def _charge(self, req: Req, extend: int, future: int, new_chunk: bool) -> None:
        """Admit ``req`` for ``extend`` tokens (SGLang ``_update_prefill_budget``); with
        ``new_chunk`` it is the request cut for the first time this pass (``new_chunked_req``)."""
        pages = ceil_to_page(extend, self.page_size)
        if self.swa is not None:  # same full charges, and the window's on the SWA budget
            self.swa.reserve(extend, future, extra_tokens=self.overhead - self.page_size,
                             chunk_limit=self.rem_chunk_tokens)
        self.charges.append(pages + self.overhead + future)
        self.rem_total_token_offset += pages + self.overhead + future
        self.cur_rem_token_offset += pages + self.overhead
        self.rem_input_tokens -= pages
        if self.rem_chunk_tokens is not None:
            self.rem_chunk_tokens -= pages
        self.log_hit_tokens += req.prefix_len if req.req_pool_idx < 0 else 0
        self.log_input_tokens += extend if self.release.prefill_log_raw_tokens else pages
        req.extend_len = extend
        self.can_run_list.append(req)
        if new_chunk:
            self.new_chunked_req = req

    def _future(self, req: Req, extend: int, truncated: bool) -> int:
        """Tokens charged for what ``req`` will still write (0 for a partial chunk)."""
        policy, p = self.config.policy, self.page_size
        if truncated or policy is Policy.NO_RESERVE:
            return 0
        if policy is Policy.RESERVE_ALL:
            return int(footprint(req.prompt_len, req.max_new_tokens, p)
                       - ceil_to_page(req.prefix_len + extend, p))
        return min(req.max_new_tokens, self.config.clip_max_new_tokens)

    def newcomer_need(self, req: Req, extend: int) -> float:
        """The newcomer test's left side; refused when it is ``>= rem_total_tokens``.

        ``sglang``: ``extend + min(max(max_new_tokens - generated, 0), CLIP)`` (+ a page in
        0.5.23); ``reserve_all``: its remaining footprint; ``no_reserve``: its prompt pages.
        """
        policy, p = self.config.policy, self.page_size
        if policy is Policy.SGLANG:
            left = max(req.max_new_tokens - req.generated, 0)
            return extend + min(left, self.config.clip_max_new_tokens) + self.overhead
        if policy is Policy.RESERVE_ALL:
            return int(footprint(req.prompt_len, req.max_new_tokens, p)
                       - ceil_to_page(req.prefix_len, p))
        return ceil_to_page(extend, p)

    # ----- the three ways in ------------------------------------------------------------
    def add_chunked_req(self, req: Req) -> Req | None:
        """Continue a chunked prefill; return the request again if it is still not done.

        The chunk is ``min(rem_chunk_tokens, int(rem_total_tokens))``, or the whole chunk
        budget when that is <= 0 (the request must make progress to free its KV); nothing
        is floored to pages. Source: ``PrefillAdder.add_chunked_req``.
        """
        if self.swa is not None:  # no SWA room: the chunk waits (parked, not in the pass)
            swa_room = self.swa.available_chunk_tokens(self.rem_chunk_tokens)
            if swa_room is None:
                return req
            room = swa_room
        else:
            room = min(self.rem_chunk_tokens, int(self.rem_total_tokens))
            if room <= 0:
                room = self.rem_chunk_tokens
        extend = req.fill_len - req.prefix_len
        truncated = extend > room
        extend = min(extend, room)
        # a continuation is returned, not made ``new_chunked_req`` (SGLang sets that only for a
        # request cut for the first time)
        self._charge(req, extend, self._future(req, extend, truncated), False)
        return req if truncated else None

    def add_one_req(self, req: Req) -> AddReqResult:
        """Try to admit ``req``, whose prefix was just matched (``req.prefix_len``,
        ``req.last_node``). Returns NO_TOKEN or OTHER without admitting it, or admits it,
        whole or as a chunk, locks its prefix and returns :meth:`budget_state`.
        Source: ``PrefillAdder.add_one_req`` (0.5.9; 0.5.23 with
        ``_select_prefill_admission`` and ``_commit_prefill_admission``).
        """
        if req.ignore_eos and self.tree_cache.disable:
            return self.add_one_req_ignore_eos(req)
        extend = req.fill_len - req.prefix_len
        input_tokens = ceil_to_page(extend, self.page_size)
        need = self.newcomer_need(req, extend)
        chunked = self.rem_chunk_tokens is not None
        both_budgets = self.release.max_prefill_tokens_with_chunking
        if both_budgets:  # 0.5.9 checks the budgets before locking the prefix too
            if need >= self.rem_total_tokens:
                return AddReqResult.NO_TOKEN
            if input_tokens >= self.rem_input_tokens and self.can_run_list:
                return AddReqResult.OTHER
        tree, node = self.tree_cache, req.last_node
        tree.inc_lock_ref(node)  # the prefix stops being evictable while we decide
        try:
            if not need < self.rem_total_tokens:
                return AddReqResult.NO_TOKEN
            limit = self.rem_chunk_tokens
            if self.swa is not None:  # the SWA room may refuse, or cut the chunk
                ok, limit = self.swa.check_prefill(
                    extend_input_len=extend, total_tokens=int(need),
                    max_new_tokens=self._swa_new_tokens(req), chunk_limit=limit)
                if not ok:
                    return AddReqResult.NO_TOKEN
            if ((both_budgets or not chunked) and self.can_run_list
                    and input_tokens >= self.rem_input_tokens):
                return AddReqResult.OTHER
            truncated = limit is not None and input_tokens > limit
            if truncated:
                p = self.page_size
                extend = limit // p * p
                if self.release.chunk_ends_on_page_boundary:  # of the sequence
                    extend = (req.prefix_len + extend) // p * p - req.prefix_len
                if extend <= 0:
                    return AddReqResult.OTHER
            if isinstance(tree, SWAPrefixCache):  # SGLang's TreeLock, kept by the request
                req.swa_lock = tree.lock(node)
            else:
                tree.inc_lock_ref(node)  # held until the request releases its KV
            self._charge(req, extend, self._future(req, extend, truncated), truncated)
        finally:
            tree.dec_lock_ref(node)
        return self.budget_state()

    def add_one_req_ignore_eos(self, req: Req) -> AddReqResult:
        """Admission of an ignore-EOS request with the radix cache off: a worst-case
        simulation in which every request runs to its limit, the one that finishes first
        frees its tokens for the rest (:func:`~pagedkv.managers.reservation.
        ignore_eos_worst_case_fits`).
        Source: ``PrefillAdder.add_one_req_ignore_eos``.
        """
        extend = req.fill_len - req.prefix_len
        paged = ceil_to_page(extend, self.page_size) + self.overhead
        # the budgets are never NaN (SchedulerConfig refuses a NaN ratio), so this is also
        # 0.5.23's ``not paged <= ...``
        if paged > min(self.cur_rem_tokens, self.rem_total_tokens):
            return AddReqResult.NO_TOKEN
        if self.swa is not None and not self.swa.swa_tokens(
                extend, self._swa_new_tokens(req),
                chunk_limit=self.rem_chunk_tokens) <= self.swa.remaining_swa:
            return AddReqResult.NO_TOKEN
        self.req_states = ignore_eos_states(req, self.running, self.can_run_list,
                                            self.new_token_ratio, self.req_states)
        # a sliding-window hybrid skips the simulation (SGLang: it underestimates SWA use)
        if self.swa is None and not ignore_eos_worst_case_fits(self.req_states,
                                                               self.cur_rem_tokens - paged):
            return AddReqResult.NO_TOKEN
        if self.rem_chunk_tokens is None or extend <= self.rem_chunk_tokens:
            self._charge(req, extend, self._future(req, extend, False), False)
        else:
            if self.rem_chunk_tokens <= 0:
                return AddReqResult.OTHER
            self._charge(req, self.rem_chunk_tokens, 0, True)
        return self.budget_state()
