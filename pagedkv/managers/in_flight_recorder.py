"""What the overlap loop leaves half done after each step, for the visualizer's page record.

In SGLang's default loop (``event_loop_overlap``,
:meth:`pagedkv.managers.scheduler.Scheduler.event_loop_overlap`) one batch is in flight at the
end of every step: the GPU runs it while the CPU schedules the next. :class:`InFlightRecorder`
keeps, for :class:`~pagedkv.managers.page_recorder.PageRecorder`:

- **ahead**: slots *allocated ahead*: allocated by the batch in flight, whose KV that batch
  has not yet written; they are the last ``tokens`` of a request's row. The rule: after a
  decode step of the overlap loop, every request holding a row has its last slot ahead (the
  decode step allocated it for the token the previous batch sampled, which the scheduler
  commits only after launching); after any other step, and in the normal loop, none. The
  list holds where the record differs from the rule: a prefill in flight (its requests'
  ``extend_len`` slots), a request not in the decode batch (0 tokens). SGLang 0.5.23 moves
  ``kv_allocated_len`` and ``kv_committed_len`` together when it allocates a decode slot
  (``mem_cache/allocation.py``; they differ only with speculative decoding), so neither
  field marks these slots: the in-flight batch's ``out_cache_loc`` does.
- **unseen**: requests that have *finished but are not yet seen*: the batch in flight after
  that step sampled their last token (EOS or ``max_new_tokens``); the scheduler sees it when
  it processes that batch's result, a step later, and frees their KV then (in the normal
  loop the same step frees it, so none). Recorded when the finish is seen, for the step
  before: only processing a batch's result finishes a request.

:func:`joining_requests` names the in-flight prefill's requests, which hold KV a step before
they join the running batch (``get_next_batch_to_run``): the page record and the trace's
``tokens_used`` count them.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from pagedkv.managers.req import Req


class InFlightBatch(Protocol):
    """What is read of an in-flight pass
    (:class:`~pagedkv.model_executor.forward_batch_info.ForwardBatch`)."""

    mode: str
    reqs: list[Req]
    req_pool_indices: np.ndarray
    extend_lens: np.ndarray


class InFlightView(Protocol):
    """What is read of the overlap loop's batch in flight
    (:class:`~pagedkv.managers.scheduler_components.batch_result_processor.InFlight`)."""

    batch: InFlightBatch


class RunningView(Protocol):
    """What is read of the running batch (:class:`~pagedkv.managers.schedule_batch.ScheduleBatch`)."""

    reqs: list[Req]

    def live_index(self, rows: np.ndarray) -> np.ndarray:
        """The batch index of the unfinished request holding each row (-1: none)."""
        ...


class LoopView(Protocol):
    """What is read of a :class:`~pagedkv.managers.scheduler.Scheduler` after a step."""

    num_steps: int
    overlap: bool
    in_flight: InFlightView | None
    running: RunningView
    chunked_req: Req | None


def joining_requests(sched: LoopView) -> list[Req]:
    """The overlap loop's in-flight prefill's requests that hold KV but are neither in the
    running batch nor the chunked request: they join the running batch at the next step
    (``get_next_batch_to_run``), before their first token is known. Empty in the normal
    loop and while a decode step is in flight (its requests are the running batch's)."""
    f = sched.in_flight
    if f is None or f.batch.mode != "extend":
        return []
    # a request holding KV holds its row, and no other unfinished request holds it: the
    # running batch is asked for the pass's rows, not walked (it is the larger batch)
    inside = sched.running.live_index(f.batch.req_pool_indices).tolist()
    return [r for r, j in zip(f.batch.reqs, inside, strict=True)
            if j < 0 and r is not sched.chunked_req and not r.finished and r.kv_committed_len > 0]


class InFlightRecorder:
    """Slots allocated ahead (where they differ from the rule) and requests finished but
    not yet seen, per step, as int columns (see the module docstring).

    Attributes:
        ahead: ``{"step", "rid", "tokens"}``, ``list[int]`` each: after ``step``, the last
            ``tokens`` slots of ``rid``'s row are allocated ahead (0: none), where the rule
            does not say so.
        unseen: ``{"step", "rid"}``, ``list[int]`` each: ``rid`` had finished after
            ``step`` but was not yet seen.
        overlap: whether the run is the overlap loop's (None before the first step).
    """

    def __init__(self) -> None:
        self.ahead: dict[str, list[int]] = {"step": [], "rid": [], "tokens": []}
        self.unseen: dict[str, list[int]] = {"step": [], "rid": []}
        self.overlap: bool | None = None
        self._flight: list[Req] = []  # the in-flight requests holding a row at the last step

    def record(self, sched: LoopView, kind: str, rids: list[int]) -> None:
        """Step ``sched.num_steps`` (of ``kind``, just run; ``rids``: the requests holding a
        row now): its slots allocated ahead where they differ from the rule, and the
        requests whose finish it saw, as unseen the step before."""
        step = sched.num_steps
        self.overlap = sched.overlap
        for r in self._flight:
            if r.finished:
                self.unseen["step"].append(step - 1)
                self.unseen["rid"].append(r.rid)
        f, holding = sched.in_flight, set(rids)
        actual: dict[int, int] = {}
        self._flight = []
        if f is not None:
            for r, n in zip(f.batch.reqs, f.batch.extend_lens.tolist(), strict=True):
                if r.rid in holding and not r.finished:
                    actual[r.rid] = n
                    self._flight.append(r)
        rule = 1 if sched.overlap and kind == "decode" else 0
        for rid in rids:
            n = actual.get(rid, 0)
            if n != rule:
                for name, v in zip(("step", "rid", "tokens"), (step, rid, n), strict=True):
                    self.ahead[name].append(v)

    def to_dict(self) -> dict[str, Any]:
        """``{"ahead": {...}, "unseen": {...}, "overlap": bool}``, lists of ints."""
        return {"ahead": {k: list(v) for k, v in self.ahead.items()},
                "unseen": {k: list(v) for k, v in self.unseen.items()},
                "overlap": bool(self.overlap)}
