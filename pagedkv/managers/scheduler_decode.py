"""Decode steps: the memory check, retraction, the step itself, and many steps at once.

Follows SGLang's ``python/sglang/srt/managers/scheduler.py`` (``update_running_batch``,
``run_batch``). A mixin of :class:`~pagedkv.managers.scheduler.Scheduler`.

Before each decode step ``check_decode_mem`` evicts from the tree if needed and asks whether
the step's new pages fit; if not, ``retract_decode`` sends victims back to the END of the
waiting queue (their output kept, their prompt prefix left in the tree) and resets
``new_token_ratio``; if they fit, the ratio decays by ``(init - min) / 600``. After the step,
requests that stopped release their KV into the tree
(:class:`~pagedkv.managers.scheduler_components.SchedulerBatchResultProcessor`). With an
executor that predicts its step times, quiet stretches of decode steps are taken as one
window (:class:`~pagedkv.managers.scheduler_components.DecodeFastForward`).
"""

from __future__ import annotations

import numpy as np

from pagedkv.managers.scheduler_components import LoopCounters
from pagedkv.managers.scheduler_state import SchedulerState
from pagedkv.model_executor.forward_batch_info import ForwardBatch


class SchedulerDecodeMixin(SchedulerState):
    """Decode-side methods of the scheduler (state lives on the scheduler)."""

    def update_running_batch(self) -> bool:
        """Drop finished requests, check memory (retract or decay the ratio), allocate the
        step's slots. Returns False when no request is left to decode, and in the overlap
        loop (0.5.23) when the step is skipped: it does not fit while requests finishing in
        flight, left out of it, are about to free their KV
        (:meth:`~pagedkv.managers.scheduler_overlap.SchedulerOverlapMixin.finishing_in_flight`).
        Source: ``Scheduler.update_running_batch``."""
        batch, cfg = self.running, self.config
        initial = len(batch)
        batch.filter_finished()
        finishing = self.finishing_in_flight()  # the overlap loop, 0.5.23
        if finishing:  # they leave the batch holding their KV; their result frees it
            batch.sync(finishing)
            batch.filter_batch(np.setdiff1d(np.arange(len(batch)), finishing))
        if not len(batch):
            batch.batch_is_full = False
            return False
        fits = batch.check_decode_mem()
        if not fits and finishing:  # skip this decode step rather than retract
            batch.batch_is_full = False
            self.num_decode_skips += 1
            return False
        if not fits:
            old_available, old_ratio = self.allocator.available_size(), self.new_token_ratio
            batch.sync()
            retracted, ratio, aborted = batch.retract_decode(
                cfg.retract_decode_steps, abort_last_request=cfg.release.abort_last_request)
            gained = self.allocator.available_size() - old_available
            self.ratio_tracker.set_after_retract(ratio)
            self.trace.add_log(self.num_steps, "KV cache pool is full. Retract requests. "
                               f"#retracted_reqs: {len(retracted)}, #new_tokens_gained: {gained}, "
                               f"#new_token_ratio: {old_ratio:.4f} -> {ratio:.4f}")
            for req in retracted:
                self.on_retract(req)
            for req in aborted:
                req.finished, req.finish_reason = True, "abort"
                self.on_finish(req)
        else:
            self.ratio_tracker.decay_step()
        if len(batch) < initial:
            batch.batch_is_full = False
        return len(batch) > 0

    def run_decode(self) -> None:
        """``prepare_for_decode``, the forward pass and ``process_batch_result_decode``."""
        batch = self.running
        ff = self.fast_forward
        steps = 1 if ff is None else ff.window_length(batch, self.chunked_req, self.clock)
        if steps > 1:
            self.fast_forward_steps(steps)
            return
        kv_tokens = int(batch.kv_len.sum())
        bs = len(batch)
        batch.prepare_for_decode()
        if ff is not None:  # the step's predicted time is all forward() would give
            self.clock += ff.executor.decode_seconds(bs, kv_tokens)
        else:
            fb = ForwardBatch("decode", batch.reqs, batch.req_pool_idx, batch.kv_len - 1,
                              np.ones(bs, dtype=np.int64), batch.last_loc,
                              np.ones(bs, dtype=bool), kv_tokens, self.req_to_token_pool)
            result = self.executor.forward(fb)
            self.clock += result.seconds
            if result.next_token_ids is not None:
                for req, token in zip(batch.reqs, result.next_token_ids.tolist(), strict=True):
                    req.output_ids.append(int(token))
        batch.generated += 1
        self.decoded += bs
        self.num_decode_steps += 1
        self.process_batch_result_decode()

    def process_batch_result_decode(self) -> None:
        """Release every request whose latest token ends it, then log."""
        batch = self.running
        self.batch_result_processor.process_batch_result_decode(batch)
        if self.num_decode_steps % self.config.decode_log_interval == 0:
            self.log_decode(len(batch))

    def log_decode(self, bs: int) -> None:
        """SGLang's decode line for a batch of ``bs`` (at launch in the overlap loop)."""
        self.metrics_reporter.report_decode_stats(self.num_steps, self.clock, self.decoded, bs)

    def fast_forward_steps(self, k: int, overlap: bool = False) -> None:
        """Take ``k`` decode steps as one window: record steps ``0 .. k-2`` here; the caller
        records the last, as for a single step. The first step's memory check and ratio
        update have been done by :meth:`update_running_batch`. Page events: the first step
        is recorded as a single step (it may follow a retraction), the middle ones are quiet
        (:meth:`~pagedkv.managers.page_recorder.PageRecorder.record_quiet_decodes`).
        ``overlap``: the overlap loop's window (its last step logs at its launch, then the
        step before it is processed: its releases are timed at that step's end, as
        :meth:`~pagedkv.managers.scheduler_overlap.SchedulerOverlapMixin.process_in_flight`
        times a single step's)."""
        b, ff = self.running, self.fast_forward
        assert ff is not None
        window = ff.plan(k, b, self.trace.records_steps)
        pages = self.trace.page_events
        if pages is not None:
            b.decode_many(1)
            pages.record(self, "decode")
        self.clock, self.num_steps, self.num_decode_steps, self.decoded = ff.run(
            window, LoopCounters(self.clock, self.num_steps, self.num_decode_steps, self.decoded))
        if pages is None:
            b.decode_many(k)
        else:
            if k > 2:
                b.decode_many(k - 2)
                pages.record_quiet_decodes(self, self.num_steps - (k - 2), k - 2)
            b.decode_many(1)
        if not overlap:
            self.process_batch_result_decode()
            return
        if self.num_decode_steps % self.config.decode_log_interval == 0:
            self.log_decode(len(b))
        now, self.clock = self.clock, ff.last_launch_s
        self.batch_result_processor.process_batch_result_decode(b)
        self.clock = now
