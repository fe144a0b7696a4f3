"""Admission: SGLang's ``PrefillAdder`` (``python/sglang/srt/managers/schedule_policy.py``).

One prefill pass walks the waiting queue and asks, per request, whether the pool can take
it *and* what it will still write. The budget is

    rem_total_tokens = available_size + evictable - sum(reservations) - sum(charges so far)

where each running request reserves ``min(max_new_tokens - generated, CLIP) * new_token_ratio``
and each admitted request is charged ``ceil_to_page(extend_input_len) + min(max_new_tokens,
CLIP)``. A newcomer is refused (``NO_TOKEN``) when ``extend_input_len + min(max_new_tokens -
generated, CLIP) >= rem_total_tokens``: no ratio for the newcomer. The per-pass prompt budget
``max_prefill_tokens`` (the first request exempt) and the chunk budget
``chunked_prefill_size`` end the pass with ``OTHER``.

Where we simplify: no radix cache, so ``evictable = 0`` and every request's prefix match is
empty (``#cached-token: 0``); no hierarchical cache, no ``ignore_eos`` path, no priority
preemption, no mixed chunked prefill.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

import numpy as np

from pagedkv.managers.config import Policy, SchedulerConfig
from pagedkv.managers.request import Req
from pagedkv.mem_cache.allocator import ceil_to_page


class AddReqResult(Enum):
    """SGLang's ``AddReqResult``: go on, stop for memory, or stop for another budget."""

    CONTINUE = "continue"
    NO_TOKEN = "no_token"
    OTHER = "other"


def footprint(prompt_len: int, max_new_tokens: int, page_size: int) -> int:
    """Slots a request can ever hold: ``ceil_to_page(prompt_len + max_new_tokens - 1)``.

    The last sampled token's KV is never written, hence the ``- 1``. Used by ``reserve_all``.
    """
    return ceil_to_page(prompt_len + max_new_tokens - 1, page_size)


def running_reservation(config: SchedulerConfig, page_size: int, new_token_ratio: float,
                        prompt_len: np.ndarray, max_new_tokens: np.ndarray,
                        generated: np.ndarray, kv_len: np.ndarray) -> float:
    """Tokens admission holds back for the running batch's future output.

    Arrays are int64 ``[num_running]``. ``sglang``: ``sum(min(max_new_tokens - generated,
    CLIP)) * new_token_ratio`` (``PrefillAdder._get_running_request_total_token_offset``);
    ``reserve_all``: every request's remaining ``footprint`` in whole pages;
    ``no_reserve``: 0.
    """
    if config.policy is Policy.SGLANG:
        left = np.minimum(max_new_tokens - generated, config.clip_max_new_tokens)
        return float(left.sum()) * new_token_ratio
    if config.policy is Policy.RESERVE_ALL:
        final = ceil_to_page(prompt_len + max_new_tokens - 1, page_size)
        return float((final - ceil_to_page(kv_len, page_size)).sum())
    return 0.0


@dataclass
class Admission:
    """One request in a prefill pass: how many tokens it extends by, and what it was charged."""

    req: Req
    extend_len: int
    charge: float
    truncated: bool


@dataclass
class PrefillAdder:
    """Budgets for one prefill pass (SGLang ``PrefillAdder``).

    Args:
        config: constants and policy.
        page_size: tokens per page.
        available_size: the allocator's ``available_size()`` (free pages * page_size).
        running_reserved: :func:`running_reservation` of the running batch.

    Attributes:
        rem_total_token_offset: reservations plus charges so far (tokens, may be fractional).
        cur_rem_token_offset: prompt tokens charged so far.
        rem_input_tokens: what is left of ``max_prefill_tokens``.
        rem_chunk_tokens: what is left of ``chunked_prefill_size`` (None: no chunking).
        can_run_list: the admitted requests, in order.
        new_chunked_req: the request whose prompt was cut this pass, if any.
    """

    config: SchedulerConfig
    page_size: int
    available_size: int
    running_reserved: float
    rem_total_token_offset: float = field(init=False)
    cur_rem_token_offset: int = field(init=False, default=0)
    rem_input_tokens: int = field(init=False)
    rem_chunk_tokens: int | None = field(init=False)
    can_run_list: list[Admission] = field(init=False, default_factory=list)
    new_chunked_req: Req | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.rem_total_token_offset = self.running_reserved
        self.rem_input_tokens = self.config.max_prefill_tokens
        self.rem_chunk_tokens = self.config.chunked_prefill_size

    @property
    def rem_total_tokens(self) -> float:
        """``available_size - rem_total_token_offset`` (evictable radix tokens: none here)."""
        return self.available_size - self.rem_total_token_offset

    @property
    def cur_rem_tokens(self) -> int:
        """``available_size - cur_rem_token_offset``: room for the prompts alone."""
        return self.available_size - self.cur_rem_token_offset

    def _floor_page(self, tokens: int) -> int:
        return tokens // self.page_size * self.page_size

    def budget_state(self) -> AddReqResult:
        """NO_TOKEN when memory is spent, OTHER when the prompt or chunk budget is."""
        if self.rem_total_tokens <= 0 or self.cur_rem_tokens <= 0:
            return AddReqResult.NO_TOKEN
        if self.rem_input_tokens <= 0 or (self.rem_chunk_tokens is not None
                                          and self.rem_chunk_tokens <= 0):
            return AddReqResult.OTHER
        return AddReqResult.CONTINUE

    def newcomer_need(self, req: Req) -> float:
        """The newcomer test's left side; refused when it is ``>= rem_total_tokens``.

        ``sglang``: ``extend_input_len + min(max(max_new_tokens - generated, 0), CLIP)``;
        ``reserve_all``: the request's remaining footprint; ``no_reserve``: its prompt pages.
        """
        policy, p = self.config.policy, self.page_size
        if policy is Policy.SGLANG:
            left = max(req.max_new_tokens - req.generated, 0)
            return req.extend_input_len + min(left, self.config.clip_max_new_tokens)
        if policy is Policy.RESERVE_ALL:
            return footprint(req.prompt_len, req.max_new_tokens, p) - ceil_to_page(req.kv_len, p)
        return ceil_to_page(req.extend_input_len, p)

    def _future_charge(self, req: Req, extend_len: int, truncated: bool) -> int:
        """Tokens charged beyond this pass's prompt pages (0 for a partial chunk, ``sglang``)."""
        policy, p = self.config.policy, self.page_size
        if policy is Policy.SGLANG:
            return 0 if truncated else min(req.max_new_tokens, self.config.clip_max_new_tokens)
        if policy is Policy.RESERVE_ALL:
            return (footprint(req.prompt_len, req.max_new_tokens, p)
                    - ceil_to_page(req.kv_len, p) - ceil_to_page(extend_len, p))
        return 0

    def _add(self, req: Req, extend_len: int, truncated: bool) -> None:
        """Append to ``can_run_list`` and charge (``PrefillAdder._update_prefill_budget``)."""
        pages = ceil_to_page(extend_len, self.page_size)
        charge = pages + self._future_charge(req, extend_len, truncated)
        self.rem_total_token_offset += charge
        self.cur_rem_token_offset += pages
        self.rem_input_tokens -= pages
        if self.rem_chunk_tokens is not None:
            self.rem_chunk_tokens -= pages
        self.can_run_list.append(Admission(req, extend_len, charge, truncated))
        if truncated:
            self.new_chunked_req = req

    def add_chunked_req(self, req: Req) -> Req | None:
        """Continue a chunked prefill; return the request again if it is still not done.

        The chunk is ``min(rem_chunk_tokens, rem_total_tokens)`` floored to pages, or the
        whole chunk budget when that is <= 0 (SGLang must make progress on it).
        """
        chunk = self.rem_chunk_tokens if self.rem_chunk_tokens is not None else req.extend_input_len
        room = self._floor_page(min(chunk, int(self.rem_total_tokens)))
        room = room if room > 0 else max(self._floor_page(chunk), self.page_size)
        truncated = req.extend_input_len > room
        self._add(req, min(req.extend_input_len, room), truncated)
        return req if truncated else None

    def add_one_req(self, req: Req) -> AddReqResult:
        """Try to admit ``req`` (SGLang ``PrefillAdder.add_one_req``).

        Returns NO_TOKEN without admitting when the newcomer test fails, OTHER when the
        prompt budget is spent (unless nothing was admitted yet); otherwise admits it, whole
        or as a page-floored chunk, and returns :meth:`budget_state`.
        """
        if self.newcomer_need(req) >= self.rem_total_tokens:
            return AddReqResult.NO_TOKEN
        input_tokens = ceil_to_page(req.extend_input_len, self.page_size)
        if input_tokens >= self.rem_input_tokens and self.can_run_list:
            return AddReqResult.OTHER
        if self.rem_chunk_tokens is None or input_tokens <= self.rem_chunk_tokens:
            self._add(req, req.extend_input_len, truncated=False)
        else:
            trunc_len = self._floor_page(self.rem_chunk_tokens)
            if trunc_len <= 0:
                return AddReqResult.OTHER
            self._add(req, trunc_len, truncated=True)
        return self.budget_state()
