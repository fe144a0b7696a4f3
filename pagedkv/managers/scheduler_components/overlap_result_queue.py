"""The overlap loop's batch in flight: what scheduling reads of it before its result is in.

Follows SGLang 0.5.23's ``Scheduler.event_loop_overlap`` (``python/sglang/srt/managers/
scheduler.py``: ``result_queue``, ``is_disable_overlap_for_batch``), its future map
(``managers/overlap_utils.py``, ``FutureMap``: the in-flight pass's sampled tokens, handed to
the next decode step before they are committed) and ``update_running_batch``'s
``_reqs_finishing_inflight``. While the GPU runs batch ``N``, the CPU schedules batch
``N + 1``; batch ``N``'s result is processed after batch ``N + 1`` is launched
(:meth:`~pagedkv.managers.scheduler_components.SchedulerBatchResultProcessor.
process_batch_result`). SGLang's queue holds at most one batch between iterations, so this
one holds one :class:`~pagedkv.managers.scheduler_components.InFlight` or None.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pagedkv.managers.req import Req
from pagedkv.managers.schedule_batch import ScheduleBatch
from pagedkv.managers.scheduler_components.batch_result_processor import InFlight
from pagedkv.managers.scheduler_components.decode_fast_forward import MAX_WINDOW


@dataclass(slots=True, kw_only=True)
class OverlapResultQueue:
    """The batch launched and not yet processed, and what the next step reads of it.

    Attributes:
        skip_finishing_decode_in_flight: ``Release`` field (0.5.23): requests whose
            in-flight result reaches ``max_new_tokens`` are left out of the next decode.
        samples_tokens: the executor samples tokens (a real model): the next decode step
            takes the in-flight pass's tokens as its input (the future map).
        in_flight: the launched batch (None: none).
    """

    skip_finishing_decode_in_flight: bool
    samples_tokens: bool
    in_flight: InFlight | None = None

    def pop(self) -> InFlight | None:
        """Take the batch in flight out of the queue (its result is to be processed)."""
        f, self.in_flight = self.in_flight, None
        return f

    def in_flight_reqs(self) -> list[Req]:
        """The requests of the batch in flight (none: empty)."""
        return [] if self.in_flight is None else self.in_flight.batch.reqs

    def prefill_to_merge(self, chunked_req: Req | None) -> list[Req] | None:
        """``get_next_batch_to_run``: the in-flight prefill's requests that join the running
        batch before their first token is known (all but the one still being chunked and
        those already finished); None when no prefill is in flight."""
        f = self.in_flight
        if f is None or f.batch.mode != "extend":
            return None
        return [r for r in f.batch.reqs if r is not chunked_req and not r.finished]

    def reqs_finishing_inflight(self, running: ScheduleBatch) -> list[int]:
        """Running-batch indices of requests whose in-flight result reaches
        ``max_new_tokens`` (0.5.23's ``_reqs_finishing_inflight``; none in 0.5.9 or
        without a batch in flight)."""
        f = self.in_flight
        if f is None or not self.skip_finishing_decode_in_flight:
            return []
        ends = np.flatnonzero(running.generated + 1 >= running.max_new_tokens).tolist()
        if not ends:  # most steps: no set of the batch in flight to build
            return []
        queued = set(map(id, f.batch.reqs))
        return [i for i in ends if id(running.reqs[i]) in queued]

    def leave_out_finishing(self, running: ScheduleBatch) -> bool:
        """Take the requests :meth:`reqs_finishing_inflight` finds out of ``running``: they
        leave the batch holding their KV, which their in-flight result frees. Returns
        whether there were any (then the step may be skipped rather than retract)."""
        finishing = self.reqs_finishing_inflight(running)
        if finishing:
            running.sync(finishing)
            running.filter_batch(np.setdiff1d(np.arange(len(running)), finishing))
        return bool(finishing)

    def future_input_ids(self, running: ScheduleBatch) -> np.ndarray | None:
        """int64 ``[bs]``: the next decode step's input tokens, the in-flight pass's where it
        sampled one (SGLang's future map), else each request's newest output (-1: none);
        None for an executor that samples no tokens."""
        if not self.samples_tokens:
            return None
        f = self.in_flight
        pending = ({} if f is None or f.tokens is None else
                   {id(r): int(t) for r, t, s in zip(f.batch.reqs, f.tokens.tolist(),
                                                     f.batch.sample.tolist(), strict=True) if s})
        return np.fromiter((pending.get(id(r), r.output_ids[-1] if r.output_ids else -1)
                            for r in running.reqs), np.int64, len(running))

    def window_limit(self, running: ScheduleBatch) -> int | None:
        """The most decode steps a fast-forward window may take in the overlap loop (None:
        no window).

        Beyond the normal loop's conditions (``DecodeFastForward.window_length``), the
        batch in flight must be a decode step over exactly the running requests, so that
        each step of the window commits one token for every one of them; and (0.5.23) no
        request may reach the step at which it would be left out of the next decode step
        (``generated + 1 >= max_new_tokens`` for the in-flight result): ``k <=
        max_new_tokens - generated - 1``. The tokens committed inside the window are the
        in-flight one and those of its first ``k - 1`` steps, so nobody stops before the
        window's last step (``k <= stop_at - generated``, as in the normal loop).
        """
        f, b = self.in_flight, running
        # Req compares by identity (eq=False): list equality is the same objects, in C
        if f is None or f.batch.mode != "decode" or f.batch.reqs != b.reqs:
            return None
        if not self.skip_finishing_decode_in_flight:
            return MAX_WINDOW
        return int((b.max_new_tokens - b.generated - 1).min())
