"""pagedkv's :class:`~pagedkv.managers.scheduler.Scheduler` on a case (:mod:`drive_loop`), one
record per step, in the form :mod:`loop_sglang` records SGLang's loop iterations:

- ``mode``: ``"EXTEND"``, ``"DECODE"`` or ``"IDLE"``; ``rids``: the batch's requests in batch
  order; for an extend, ``extend`` and ``prefix``: each request's extend and prefix lengths;
- ``chunked``: the request being chunked after the step (None: none);
- ``retracted``: the requests retracted this step, in pop order; ``retract_log``: the
  retraction log line (``#retracted_reqs``, ``#new_tokens_gained``, the ratio before and
  after, SGLang's format);
- ``finished``: the requests that finished this step (sorted); ``skipped``: the overlap
  loop skipped a decode step instead of retracting (requests finishing in flight);
- ``available``, ``evictable``: the allocator's ``available_size()`` and the tree's
  ``evictable_size()``; ``ratio``: ``new_token_ratio``; ``free``: the whole free list.

The executor (:class:`TableExecutor`) counts one time unit per forward pass and samples no
tokens: the requests are given their outputs (``output_ids``, the case's table, so the tree
caches the same tokens SGLang's does) and stop at their EOS (``output_len``), as a simulated
request does; ``fast_forward=False`` takes decode steps one at a time.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from drive_loop import LoopCase

from pagedkv.configs.mamba_utils import Mamba2CacheParams, Mamba2StateShape
from pagedkv.managers.config import SchedulerConfig
from pagedkv.managers.scheduler import Scheduler
from pagedkv.managers.scheduler_init import SlidingWindowPools
from pagedkv.mem_cache.mamba_pool import HybridReqToTokenPool, MambaPool
from pagedkv.model_executor.forward_batch_info import ForwardBatch, ForwardResult
from pagedkv.workloads.synthetic import RequestSpec

#: a linear-attention hybrid's state (tiny: only the slots' bookkeeping is compared), the
#: shape ``mamba_sglang.SHAPE`` gives SGLang's pool
MAMBA_SHAPE = dict(intermediate_size=8, n_groups=2, num_heads=2, head_dim=4, state_size=4,
                   conv_kernel=4)


class TableExecutor:
    """A forward pass takes one time unit; notes each batch it is given (every pass is run,
    decode steps included: it does not predict its step times)."""

    predicts_step_times = False
    eos_token_ids: tuple[int, ...] = ()

    def __init__(self) -> None:
        self.launched: list[dict[str, Any]] = []

    def forward(self, batch: ForwardBatch) -> ForwardResult:
        rec: dict[str, Any] = {"mode": batch.mode.upper(), "rids": [r.rid for r in batch.reqs]}
        if batch.mode == "extend":
            rec["extend"] = batch.extend_lens.tolist()
            rec["prefix"] = batch.prefix_lens.tolist()
        self.launched.append(rec)
        return ForwardResult(1.0, None)


def specs(case: LoopCase) -> list[RequestSpec]:
    """The case's requests as pagedkv's workload entries."""
    out = []
    for r in case.requests:
        stop = r.eos_len if r.eos_len is not None else r.max_new_tokens
        out.append(RequestSpec(
            prompt_len=len(r.prompt), output_len=min(stop, r.max_new_tokens),
            max_new_tokens=r.max_new_tokens, arrival_s=float(r.arrival),
            input_ids=r.prompt, output_ids=r.outputs, ignore_eos=r.ignore_eos))
    return out


def build(case: LoopCase, release: str = "0.5.23") -> tuple[Scheduler, TableExecutor]:
    """pagedkv's scheduler for ``case`` (SGLang ``release``'s behaviour; the overlap loop
    when ``case.overlap``, else the normal loop)."""
    config = SchedulerConfig(
        schedule_conservativeness=case.schedule_conservativeness,
        max_prefill_tokens=case.max_prefill_tokens,
        chunked_prefill_size=case.chunked_prefill_size,
        max_running_requests=case.max_running_requests,
        disable_overlap_schedule=not case.overlap,
        disable_consecutive_prefill_overlap=case.disable_consecutive_prefill_overlap,
        swa_eviction_interval=case.swa_eviction_interval, release=release)
    swa = (None if case.sliding_window_size is None
           else SlidingWindowPools(case.sliding_window_size, case.swa_pool_tokens))
    mamba = (None if case.mamba_slots is None
             else MambaPool(case.mamba_slots, Mamba2CacheParams(
                 Mamba2StateShape.create(tp_world_size=1, **MAMBA_SHAPE), (0, 1))))
    executor = TableExecutor()
    sched = Scheduler(specs(case), max_total_num_tokens=case.pool_tokens,
                      page_size=case.page_size, config=config, radix_cache=case.radix,
                      context_len=case.context_len, executor=executor, fast_forward=False,
                      swa=swa, mamba_pool=mamba)
    return sched, executor


def run(case: LoopCase, release: str = "0.5.23") -> list[dict[str, Any]]:
    """One record per step of pagedkv's scheduler on ``case`` (following ``release``)."""
    sched, executor = build(case, release)
    trace = sched.trace
    records: list[dict[str, Any]] = []
    seen_events = seen_log = skips = 0
    while sched.step():
        rec: dict[str, Any] = executor.launched.pop() if executor.launched else {"mode": "IDLE"}
        events, seen_events = trace.events[seen_events:], len(trace.events)
        log, seen_log = trace.log[seen_log:], len(trace.log)
        rec["chunked"] = None if sched.chunked_req is None else sched.chunked_req.rid
        rec["retracted"] = [e.rid for e in events if e.kind == "retract"]
        rec["retract_log"] = [line for line in log if "Retract requests" in line]
        rec["finished"] = sorted(e.rid for e in events if e.kind in ("finish", "abort"))
        rec["skipped"], skips = sched.counters.num_decode_skips > skips, sched.counters.num_decode_skips
        rec["available"] = int(sched.allocator.available_size())
        rec["evictable"] = int(sched.tree_cache.evictable_size())
        rec["ratio"] = float(sched.new_token_ratio)
        alloc = sched.allocator
        if case.sliding_window_size is not None:  # both pools, as loop_sglang records them
            rec["full_available"] = int(alloc.full_available_size())
            rec["swa_available"] = int(alloc.swa_available_size())
            rec["swa_evictable"] = int(sched.tree_cache.swa_evictable_size())
            rec["free"] = np.asarray(alloc.full_attn_allocator.free_pages).tolist()
            rec["swa_free"] = np.asarray(alloc.swa_attn_allocator.free_pages).tolist()
        else:
            rec["free"] = np.asarray(alloc.free_pages).tolist()
        pool = sched.req_to_token_pool
        if isinstance(pool, HybridReqToTokenPool):  # state slots and rows, as loop_sglang
            rec["mamba_available"] = int(pool.mamba_allocator.available_size())
            rec["mamba_free"] = [int(s) for s in pool.mamba_allocator.free_slots]
            rec["rows_free"] = [int(r) for r in pool.free_slots]
            tree = sched.tree_cache
            if not tree.disable:  # the radix cache on: the states it holds
                rec["mamba_in_tree"] = int(tree.mamba_evictable_size() + tree.mamba_protected_size())
                nodes = list(tree.tree.nodes())
                rec["tree_kv"] = sorted(int(x) for n in nodes for x in n.full)
                rec["tree_states"] = sorted(n.mamba for n in nodes if n.mamba is not None)
                rec["tree_sizes"] = [tree.tree.full_evictable_size(), tree.tree.full_protected_size(),
                                     tree.mamba_evictable_size(), tree.mamba_protected_size()]
        records.append(rec)
    return records
