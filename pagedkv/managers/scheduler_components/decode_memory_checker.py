"""Whether the next decode step fits the pool, and what happens when it does not.

Follows SGLang 0.5.23's ``Scheduler.update_running_batch`` (``python/sglang/srt/managers/
scheduler.py``), the part after the finished requests are dropped: ``batch.check_decode_mem()``
(every request's next slot, evicting from the tree if needed); if the step fits,
``new_token_ratio`` decays one step (:class:`NewTokenRatioTracker`); if not,
``batch.retract_decode`` sends requests back to the queue (0.5.23: or aborts the last one),
the ratio becomes its estimate and SGLang's warning is logged. 0.5.23's overlap loop skips
the step instead when requests finishing in flight, left out of it, are about to free their
KV (``_reqs_finishing_inflight``). ``update_running_batch`` itself stays in ``scheduler.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

from pagedkv.managers.schedule_batch import ScheduleBatch
from pagedkv.managers.scheduler_components.loop_counters import LoopCounters
from pagedkv.managers.scheduler_components.new_token_ratio_tracker import NewTokenRatioTracker
from pagedkv.managers.scheduler_components.request_tracker import SchedulerRequestTracker
from pagedkv.managers.trace import Trace
from pagedkv.managers.trace_summary import SummaryTrace
from pagedkv.mem_cache.allocator import BaseTokenToKVPoolAllocator
from pagedkv.mem_cache.allocator.mamba import MambaSlotAllocator


@dataclass(slots=True, kw_only=True, frozen=True)
class DecodeMemoryChecker:
    """Checks a decode step's memory; retracts, skips or decays the ratio.

    Attributes:
        token_to_kv_pool_allocator: the pool (its free slots before and after a retraction).
        ratio_tracker: ``new_token_ratio`` (decays on a fit; the estimate after a retraction).
        request_tracker: records each retracted and each aborted request.
        trace: where the warning line goes.
        counters: the loop's step and clock (the events' time) and its skip count.
        retract_decode_steps: SGLang's ``SGLANG_RETRACT_DECODE_STEPS`` (tokens kept free per
            request that stays).
        abort_last_request: ``Release`` field (0.5.23): a last request that still does not
            fit is aborted rather than left to fail.
        mamba_slots: a linear-attention hybrid's state slots, whose count before and after
            the retraction the warning line adds (``#mamba_num_gained``,
            ``Release.retract_log_counts_mamba_slots``); None: no such count.
    """

    token_to_kv_pool_allocator: BaseTokenToKVPoolAllocator
    ratio_tracker: NewTokenRatioTracker
    request_tracker: SchedulerRequestTracker
    trace: Trace | SummaryTrace
    counters: LoopCounters
    retract_decode_steps: int
    abort_last_request: bool
    mamba_slots: MambaSlotAllocator | None = None

    def check_decode_mem(self, batch: ScheduleBatch, can_skip: bool) -> bool:
        """The running ``batch``'s next decode step: True if it goes ahead (it fits, and the
        ratio decays; or requests were retracted until it fits); False if it is skipped
        (it does not fit and ``can_skip``: requests finishing in flight will free KV),
        counted in ``counters.num_decode_skips``.

        Raises:
            OutOfMemoryError: (0.5.9) the last request alone does not fit.
        """
        if batch.check_decode_mem():
            self.ratio_tracker.decay_step()
            return True
        if can_skip:
            self.counters.num_decode_skips += 1
            return False
        self.retract(batch)
        return True

    def retract(self, batch: ScheduleBatch) -> None:
        """``retract_decode`` on ``batch``: the ratio becomes its estimate, the warning line
        is logged (SGLang's text), the retracted rejoin the queue and the aborted finish."""
        allocator, c = self.token_to_kv_pool_allocator, self.counters
        old_available, old_ratio = allocator.available_size(), self.ratio_tracker.current
        slots = self.mamba_slots
        old_slots = None if slots is None else slots.available_size()
        batch.sync()
        retracted, ratio, aborted = batch.retract_decode(
            self.retract_decode_steps, abort_last_request=self.abort_last_request)
        gained = allocator.available_size() - old_available
        self.ratio_tracker.set_after_retract(ratio)
        mamba = ("" if slots is None or old_slots is None
                 else f"#mamba_num_gained: {slots.available_size() - old_slots}, ")
        self.trace.add_log(c.num_steps, retract_line(len(retracted), gained, old_ratio, ratio, mamba))
        for req in retracted:
            self.request_tracker.retract(req, c.num_steps, c.clock)
        for req in aborted:
            req.finished, req.finish_reason = True, "abort"
            self.request_tracker.finish(req, c.num_steps, c.clock)


def retract_line(retracted: int, gained: int, old_ratio: float, ratio: float, mamba: str = "") -> str:
    """SGLang's retraction warning (``mamba``: a linear-attention hybrid's
    ``#mamba_num_gained`` field, or empty)."""
    return ("KV cache pool is full. Retract requests. "
            f"#retracted_reqs: {retracted}, #new_tokens_gained: {gained}, "
            f"{mamba}#new_token_ratio: {old_ratio:.4f} -> {ratio:.4f}")
