"""What the event-loop references of every release (:mod:`loop_sglang`, :mod:`loop_sglang_0509`)
put around SGLang's own loop to feed it a case and record it: the receiver's shared part
(arrivals delivered by the case's clock, one record per iteration) and the wrappers of
``run_batch`` and ``ScheduleBatch.retract_decode`` that note what each iteration launched
and retracted. How a release's loop ends and where it keeps its ratio stay in its module."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from drive_loop import LoopCase
from sgl_standins import Retractions


class ScriptRecorder:
    """The case's side of SGLang's request ingestion: delivers arrivals, records each
    iteration's outcome and the memory it left. A release's receiver adds the call SGLang
    makes (and how the case ends) and :meth:`ratio`."""

    def __init__(self, sched: Any, case: LoopCase, log: Retractions,
                 tokenized: Callable[[int, LoopCase], Any]) -> None:
        self.sched, self.case, self.log, self.tokenized = sched, case, log, tokenized
        self.pending = sorted(range(len(case.requests)), key=lambda r: case.requests[r].arrival)
        self.clock = 0
        self.reqs: dict[int, Any] = {}
        self.finished: set[int] = set()
        self.launched: list[dict[str, Any]] = []  # the batch run_batch got this iteration
        self.retracted: list[int] = []
        self.skipped = False  # update_running_batch returned None: the step was skipped
        self.records: list[dict[str, Any]] = []
        self.iterations = 0

    def arrivals(self) -> list[Any]:
        """The requests whose arrival has come (after an idle iteration with nothing waiting,
        the clock jumps to the next arrival), as the tokenizer manager sends them."""
        idle = self.records and self.records[-1]["mode"] == "IDLE"
        if idle and not self.sched.waiting_queue and self.pending:
            self.clock = max(self.clock, self.case.requests[self.pending[0]].arrival)
        out = []
        while self.pending and self.case.requests[self.pending[0]].arrival <= self.clock:
            out.append(self.tokenized(self.pending.pop(0), self.case))
        return out

    def ratio(self) -> float:
        """The scheduler's new-token ratio (where it keeps it differs by release)."""
        raise NotImplementedError

    def record(self) -> dict[str, Any]:
        """What the iteration just ended did, and the memory it left."""
        sched = self.sched
        for req in list(sched.waiting_queue) + list(sched.running_batch.reqs):
            self.reqs.setdefault(int(req.rid), req)
        if sched.chunked_req is not None:
            self.reqs.setdefault(int(sched.chunked_req.rid), sched.chunked_req)
        newly = sorted(r for r, req in self.reqs.items()
                       if (req.finished() or _aborted(req)) and r not in self.finished)
        self.finished.update(newly)
        rec: dict[str, Any] = {"mode": "IDLE"}
        if self.launched:
            rec = self.launched.pop()
            self.clock += 1
        rec["chunked"] = None if sched.chunked_req is None else int(sched.chunked_req.rid)
        rec["retracted"], self.retracted = self.retracted, []
        rec["retract_log"], self.log.lines[:] = list(self.log.lines), []
        rec["finished"] = newly
        rec["skipped"], self.skipped = self.skipped, False
        alloc = sched.token_to_kv_pool_allocator
        rec["available"] = int(alloc.available_size())
        rec["evictable"] = int(sched.tree_cache.evictable_size())
        rec["ratio"] = self.ratio()
        if hasattr(alloc, "swa_attn_allocator"):  # a sliding-window hybrid: both pools
            tree = sched.tree_cache
            rec["full_available"] = int(alloc.full_available_size())
            rec["swa_available"] = int(alloc.swa_available_size())
            rec["swa_evictable"] = int(tree.swa_evictable_size()) if tree.supports_prefix_sharing() else 0
            rec["free"] = alloc.full_attn_allocator.free_pages.tolist()
            rec["swa_free"] = alloc.swa_attn_allocator.free_pages.tolist()
        else:
            rec["free"] = alloc.free_pages.tolist()
        slots = getattr(sched.req_to_token_pool, "mamba_allocator", None)
        if slots is not None:  # a linear-attention hybrid: its state slots and rows
            rec["mamba_available"] = int(slots.available_size())
            rec["mamba_free"] = slots.free_slots.tolist()
            rec["rows_free"] = [int(r) for r in sched.req_to_token_pool.free_slots]
            if sched.tree_cache.supports_prefix_sharing():  # the radix cache on: its states
                rec["mamba_in_tree"] = int(sched.tree_cache.mamba_evictable_size()
                                           + sched.tree_cache.mamba_protected_size())
                rec.update(mamba_tree_contents(sched.tree_cache))
        return rec


def mamba_tree_contents(tree_cache: Any) -> dict[str, Any]:
    """What SGLang's ``(FULL, MAMBA)`` tree holds (its Rust tree core lists no nodes): the KV
    slots and the state slots, each sorted, and its four sizes (full and state, evictable
    and protected); :mod:`loop_pagedkv` gives pagedkv's in the same form."""
    t = tree_cache
    return {"tree_kv": sorted(int(x) for x in t.all_values_flatten().tolist()),
            "tree_states": sorted(int(x) for x in t.all_mamba_values_flatten().view(-1).tolist()),
            "tree_sizes": [int(t.full_evictable_size()), int(t.full_protected_size()),
                           int(t.mamba_evictable_size()), int(t.mamba_protected_size())]}


def _aborted(req: Any) -> bool:
    """Aborted by ``retract_decode`` (0.5.23: the last request that cannot decode is handed
    back with ``to_finish`` set and never runs again, so ``finished()`` stays False)."""
    reason = getattr(req, "to_finish", None)
    return reason is not None and type(reason).__name__ == "FINISH_ABORT"


def note_batches(sched: Any, receiver: ScriptRecorder) -> None:
    """Wrap ``sched.run_batch`` (the real one runs) to note the batch each iteration launches."""
    real_run_batch = sched.run_batch

    def run_batch(batch: Any, *args: Any, **kwargs: Any) -> Any:
        rec: dict[str, Any] = {"mode": batch.forward_mode.name,
                               "rids": [int(r.rid) for r in batch.reqs]}
        if batch.forward_mode.is_extend():
            rec["extend"] = [int(n) for n in batch.extend_lens]
            rec["prefix"] = [int(n) for n in batch.prefix_lens]
        receiver.launched.append(rec)
        for req in batch.reqs:  # a request that finishes in its prefill is never queued
            receiver.reqs.setdefault(int(req.rid), req)
        return real_run_batch(batch, *args, **kwargs)

    sched.run_batch = run_batch


def note_retractions(batch_class: Any, receiver: ScriptRecorder) -> Callable[[], None]:
    """Wrap ``batch_class.retract_decode`` (SGLang's ``ScheduleBatch``; the real one runs) to
    note its victims; returns what puts the real one back."""
    real_retract = batch_class.retract_decode

    def retract_decode(self: Any, *args: Any, **kwargs: Any) -> Any:
        retracted, ratio, aborted = real_retract(self, *args, **kwargs)
        receiver.retracted.extend(int(r.rid) for r in retracted)
        return retracted, ratio, aborted

    batch_class.retract_decode = retract_decode

    def restore() -> None:
        batch_class.retract_decode = real_retract

    return restore
