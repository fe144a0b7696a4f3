"""Worked admission examples on real memory: a running batch in a pool, newcomers offered to
SGLang's ``PrefillAdder``.

Chapter 4 asks "would this request be admitted now?". Every answer here comes from the real
pieces: an allocator whose free list holds exactly the free slots, a running
:class:`~pagedkv.managers.schedule_batch.ScheduleBatch` whose requests hold their KV in it,
the prefix cache (off unless the example caches a prefix), and
:class:`~pagedkv.managers.schedule_policy.PrefillAdder` itself. A pass here only asks: it
admits on paper, allocates nothing and undoes its prefix locks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pagedkv.errors import bad_value
from pagedkv.managers.config import SchedulerConfig
from pagedkv.managers.req import Req
from pagedkv.managers.schedule_batch import ScheduleBatch
from pagedkv.managers.schedule_policy import AddReqResult, PrefillAdder
from pagedkv.mem_cache.allocator import ceil_to_page, make_allocator
from pagedkv.mem_cache.chunk_cache import ChunkCache
from pagedkv.mem_cache.memory_pool import ReqToTokenPool
from pagedkv.mem_cache.radix_cache import RadixCache


@dataclass(frozen=True)
class UniformBatch:
    """``n`` running requests of one shape, for worked admission examples.

    ``kv_len`` is ``prompt_len + generated - 1``: the newest sampled token's KV is written by
    the next decode step (tokens).
    """

    n: int
    prompt_len: int
    max_new_tokens: int
    generated: int

    @property
    def kv_len(self) -> int:
        """KV tokens each request holds."""
        return self.prompt_len + self.generated - 1

    @property
    def tokens_used(self) -> int:
        """KV tokens the whole batch holds: ``n * kv_len``."""
        return self.n * self.kv_len

    def requests(self) -> list[Req]:
        """The batch as :class:`Req` objects (rids ``0 .. n-1``)."""
        reqs = []
        for i in range(self.n):
            r = Req(i, self.prompt_len, None, self.max_new_tokens)
            r.generated = self.generated
            reqs.append(r)
        return reqs


def running_state(reqs: Sequence[Req], pool_tokens: int, config: SchedulerConfig,
                  page_size: int = 1, radix: bool = False) -> ScheduleBatch:
    """A real pool of ``pool_tokens`` slots whose running batch is ``reqs``, each holding
    ``prompt_len + generated - 1`` tokens of KV (allocated in order, from a fresh free list).

    Returns the batch; its ``allocator``, ``tree_cache`` and ``req_to_token_pool`` are the
    rest of the state. Raises ConfigError when the batch does not fit the pool.
    """
    p = page_size
    pool_tokens = pool_tokens // p * p
    kv = np.array([r.prompt_len + r.generated - 1 for r in reqs], dtype=np.int64)
    held = int(ceil_to_page(kv, p).sum()) if len(reqs) else 0
    if held > pool_tokens:
        raise bad_value("pool_tokens", pool_tokens, f">= {held} (the batch's KV in pages of {p})")
    allocator = make_allocator(pool_tokens, p)
    longest = max((r.prompt_len + r.max_new_tokens for r in reqs), default=1) + p
    pool = ReqToTokenPool(len(reqs) + 1, longest)
    tree = (RadixCache if radix else ChunkCache).for_release(pool, allocator, config.release)
    batch = ScheduleBatch(pool, allocator, tree)
    table = pool.req_to_token.numpy()
    for r, n in zip(reqs, kv.tolist(), strict=True):
        r.req_pool_idx = pool.alloc(1)[0]
        out = allocator.alloc_extend([0], [n], [-1], n, strict=True).numpy()
        table[r.req_pool_idx, :n] = out
        r.kv_committed_len = n
    batch.merge_batch(list(reqs))
    return batch


@dataclass(frozen=True)
class AdmissionState:
    """What ``PrefillAdder`` starts a pass from (tokens).

    ``rem_total_tokens = available + evictable - reserved``; ``per_request`` is one running
    request's reservation; ``batch`` holds the real state (allocator, cache, requests).
    """

    pool: int
    available: int
    evictable: int
    per_request: float
    reserved: float
    ratio: float
    config: SchedulerConfig
    batch: ScheduleBatch

    @property
    def rem_total_tokens(self) -> float:
        """``available + evictable - reserved``."""
        return self.available + self.evictable - self.reserved

    def adder(self) -> PrefillAdder:
        """A fresh ``PrefillAdder`` over this state."""
        b = self.batch
        return PrefillAdder(self.config, b.tree_cache, b.allocator, b, self.ratio)


def admission_state(batch: UniformBatch, pool_tokens: int, config: SchedulerConfig,
                    ratio: float, page_size: int = 1) -> AdmissionState:
    """``batch`` running in a pool of ``pool_tokens`` slots, at ``new_token_ratio`` ``ratio``.

    Raises ConfigError when the batch does not fit the pool.
    Source: ``PrefillAdder.__init__`` (the running reservation).
    """
    running = running_state(batch.requests(), pool_tokens, config, page_size)
    adder = PrefillAdder(config, running.tree_cache, running.allocator, running, ratio)
    one = min(batch.max_new_tokens - batch.generated, config.clip_max_new_tokens) * ratio
    return AdmissionState(running.allocator.size, running.allocator.available_size(),
                          running.tree_cache.evictable_size(), one,
                          adder.rem_total_token_offset, ratio, config, running)


def admission_pass(state: AdmissionState, newcomers: Sequence[Req]) -> tuple[PrefillAdder,
                                                                              AddReqResult]:
    """Offer ``newcomers`` to one ``PrefillAdder`` in order until it says stop.

    Returns the adder (``can_run_list`` holds the admissions, each with its ``extend_len``)
    and the last result (``CONTINUE`` when the whole queue got in). The prefix locks the pass
    took are released again: the state can be asked again.
    Source: ``Scheduler.get_new_batch_prefill``.
    """
    adder, tree = state.adder(), state.batch.tree_cache
    result = AddReqResult.CONTINUE
    for req in newcomers:
        match = tree.match_prefix(req.token_ids(max(req.fill_len - 1, 0)))
        req.prefix_len = req.cache_protected_len = len(match.device_indices)
        req.last_node = match.last_device_node
        result = adder.add_one_req(req)
        if result is not AddReqResult.CONTINUE:
            break
    for req in adder.can_run_list:
        tree.dec_lock_ref(req.last_node)
    return adder, result


@dataclass(frozen=True)
class SweepRow:
    """One ratio of :func:`ratio_sweep`: the starting state and how the pass ended."""

    ratio: float
    state: AdmissionState
    admitted: int
    result: AddReqResult


def ratio_sweep(batch: UniformBatch, pool_tokens: int, config: SchedulerConfig,
                ratios: Sequence[float], newcomers: Sequence[Req]) -> list[SweepRow]:
    """The same state and queue offered to ``PrefillAdder`` at each ``new_token_ratio``."""
    rows = []
    for ratio in ratios:
        state = admission_state(batch, pool_tokens, config, ratio)
        adder, result = admission_pass(state, newcomers)
        rows.append(SweepRow(ratio, state, len(adder.can_run_list), result))
    return rows


def same_requests(count: int, prompt_len: int, max_new_tokens: int) -> list[Req]:
    """``count`` identical newcomers (ids 0..count-1) whose output length is their budget."""
    return [Req(i, prompt_len, max_new_tokens, max_new_tokens) for i in range(count)]


def ratio_curve(config: SchedulerConfig, steps: np.ndarray) -> np.ndarray:
    """``new_token_ratio`` after each number of decode steps without a retraction.

    ``max(init_ratio - steps * ratio_decay, min_ratio)``; float64, same shape as ``steps``.
    Source: ``Scheduler.update_running_batch`` (the decay).
    """
    return np.maximum(config.init_ratio - np.asarray(steps) * config.ratio_decay,
                      config.min_ratio)


def admission_state_of(reqs: Sequence[Req], free: int, config: SchedulerConfig, ratio: float,
                       page_size: int = 1) -> AdmissionState:
    """``reqs`` running (their ``generated`` set) in a pool with exactly ``free`` free slots
    beside their KV, at ``new_token_ratio`` ``ratio`` (``per_request``: the first one's)."""
    p = page_size
    held = sum(int(ceil_to_page(r.prompt_len + r.generated - 1, p)) for r in reqs)
    running = running_state(reqs, held + int(ceil_to_page(free, p)), config, p)
    adder = PrefillAdder(config, running.tree_cache, running.allocator, running, ratio)
    one = (min(reqs[0].max_new_tokens - reqs[0].generated, config.clip_max_new_tokens) * ratio
           if reqs else 0.0)
    return AdmissionState(running.allocator.size, running.allocator.available_size(), 0, one,
                          adder.rem_total_token_offset, ratio, config, running)
