"""What happens to a request, as the trace tells it: admitted, chunked, retracted, finished.

pagedkv's own part (SGLang keeps per-request times in ``Req.time_stats`` and logs; pagedkv
records an :class:`~pagedkv.managers.trace.Event` for each change). The scheduler calls it
when a prefill pass admits requests (``get_new_batch_prefill``), when ``retract_decode``
sends one back to the queue (``_add_request_to_queue``) and when one has released its KV
(the batch result processor's ``on_finish``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pagedkv.managers.req import Req
from pagedkv.managers.scheduler_components.waiting_queue import WaitingQueue
from pagedkv.managers.trace import Event, Trace
from pagedkv.managers.trace_summary import SummaryTrace


@dataclass(slots=True, kw_only=True)
class SchedulerRequestTracker:
    """Records requests' admissions, chunks, retractions and finishes.

    Attributes:
        trace: where the events go.
        waiting: the waiting queue (the admitted leave it; the retracted join it; a
            finished request's followers are sent to it).
        num_finished: requests finished so far.
    """

    trace: Trace | SummaryTrace
    waiting: WaitingQueue
    num_finished: int = 0

    def admit(self, admitted: Sequence[Req], new_chunked_req: Req | None, step: int,
              clock: float) -> None:
        """A prefill pass at ``step`` (``clock`` seconds) admitted ``admitted``: the new
        ones (without a row: a continuing chunk keeps its own) leave the queue, counted
        (:meth:`Req.admit`), each with an ``admit`` / ``reprefill`` event; every chunk
        (the continuing one, ``new_chunked_req``) gets a ``chunk`` event."""
        new = []
        for req in admitted:
            if req.req_pool_idx < 0:
                new.append(req)
                self.trace.record_event(Event(step, req.admit(clock), req.rid, {
                    "extend": req.extend_len, "cached": req.prefix_len}))
            if req.req_pool_idx >= 0 or req is new_chunked_req:
                self.trace.record_event(Event(step, "chunk", req.rid, {
                    "prefix": req.prefix_len, "tokens": req.extend_len}))
        self.waiting.pop_admitted(new)

    def finish(self, req: Req, step: int, clock: float) -> None:
        """``req`` released its KV at ``step`` (``clock`` seconds): its time, its event, and
        the turns that follow it are sent."""
        req.finish_s = clock
        self.num_finished += 1
        self.trace.record_event(Event(step, "abort" if req.finish_reason == "abort" else "finish",
                                      req.rid, {"output_len": req.generated}))
        self.waiting.send_followers(req, clock)

    def retract(self, req: Req, step: int, clock: float) -> None:
        """``req`` was retracted at ``step``: it waits at the back of the queue, its output
        kept (in the overlap loop, the result of a pass it was in is dropped:
        ``is_retracted``)."""
        freed = req.fill_len - 1
        req.num_retractions += 1
        req.is_retracted = True
        req.enqueued_s = clock
        self.waiting.append(req)
        self.trace.record_event(Event(step, "retract", req.rid,
                                      {"output_len": req.generated, "freed": freed,
                                       "kept": req.kept_at_retract}))
