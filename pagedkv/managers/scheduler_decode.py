"""Decode steps: the memory check, retraction, the step itself, and many steps at once.

Follows SGLang's ``python/sglang/srt/managers/scheduler.py`` (``update_running_batch``) and
``scheduler_output_processor_mixin.py`` (``process_batch_result_decode``; 0.5.23:
``scheduler_components/batch_result_processor.py``). A mixin of
:class:`~pagedkv.managers.scheduler.Scheduler`.

Before each decode step ``check_decode_mem`` evicts from the tree if needed and asks whether
the step's new pages fit; if not, ``retract_decode`` sends victims back to the END of the
waiting queue (their output kept, their prompt prefix left in the tree) and resets
``new_token_ratio``; if they fit, the ratio decays by ``(init - min) / 600``. After the step,
requests that stopped release their KV into the tree (``cache_finished_req``, all frees of
the step in one free group).

Fast-forward (the simulator only): between events SGLang's loop does the same thing every
step, so ``k`` decode steps can be taken with one allocation and their trace rows worked out
arithmetically. A window is taken only when no prefill attempt, finish, eviction or
retraction can happen inside it (see :meth:`SchedulerDecodeMixin.window_length`). It is
exact, not approximate: every count, time and ratio in the trace is what ``k`` single steps
give, and the slots are handed out in the single steps' order (``alloc_decode_steps``), so
page tables and the free list are the same too. What it skips is only the per-step Python
work. Windows are not taken while per-step page tables are recorded (they would need a
snapshot per step); they are with page events, which a window's middle steps only extend
(new pages at the end of rows:
:meth:`~pagedkv.managers.page_recorder.PageRecorder.record_quiet_decodes`).
``Scheduler(fast_forward=False)`` forces single steps.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from pagedkv.managers.schedule_policy import window_reservations
from pagedkv.managers.scheduler_state import SchedulerState
from pagedkv.mem_cache.common import release_kv_cache
from pagedkv.model_executor.forward_batch_info import ForwardBatch

MAX_WINDOW = 4096  # decode steps per fast-forward window at most


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
        kv_tokens = int(batch.kv_len.sum())
        bs = len(batch)
        steps = self.window_length() if self.fast_forward else 1
        if steps > 1:
            self.fast_forward_steps(steps)
            return
        batch.prepare_for_decode()
        if self.fast_forward:  # the simulator: the step's modelled time is all forward() gives
            self.clock += self.executor.decode_seconds(bs, kv_tokens)
        else:
            fb = ForwardBatch("decode", batch.reqs, batch.req_pool_idx, batch.kv_len - 1,
                              np.ones(bs, dtype=np.int64), batch.last_loc,
                              np.ones(bs, dtype=bool), kv_tokens, self.req_to_token_pool)
            result = self.executor.forward(fb)
            self.clock += result.seconds
            if result.next_token_ids is not None:
                for req, token in zip(batch.reqs, result.next_token_ids.tolist(), strict=True):
                    req.output_ids.append(int(token))
                    req.last_token = int(token)
        batch.generated += 1
        self.decoded += bs
        self.num_decode_steps += 1
        self.process_batch_result_decode()

    def process_batch_result_decode(self, log_first: bool = False) -> None:
        """Release every request whose latest token ends it (one free group), then log
        (``log_first``: log, then release)."""
        batch = self.running
        log = self.num_decode_steps % self.config.decode_log_interval == 0
        if log and log_first:
            self.log_decode(len(batch))
        stop = batch.stopping()
        if self.real_tokens:
            stop |= np.fromiter((self.hit_eos(r) for r in batch.reqs), bool, len(batch))
        if stop.any():
            self.allocator.free_group_begin()
            for i in np.flatnonzero(stop).tolist():
                req = batch.reqs[i]
                batch.sync([i])
                req.finish_reason = req.should_stop() or "stop"
                req.finished = True
                release_kv_cache(req, self.tree_cache, self.req_to_token_pool, is_insert=True)
                self.on_finish(req)
            self.allocator.free_group_end()
            batch.finished |= stop
        if log and not log_first:
            self.log_decode(len(batch))

    # ----- many decode steps at once (the simulator) -------------------------------------
    def window_length(self) -> int:
        """How many decode steps, from this one, can be taken together (1: none).

        Needs: no chunked prefill pending and no prefill attempt before the last step
        (``batch_is_full``, or nobody waiting and nobody arriving in time); nobody stops
        before the last step; the free list covers every step without eviction (with
        evictable tokens in the tree, also SGLang's up-front ``bs * page_size`` ask); and
        the window pays for itself (``k >= batch / 8``).
        """
        b, p = self.running, self.allocator.page_size
        if (self.record_page_tables or self.chunked_req is not None or self.real_tokens
                or (self.waiting and not b.batch_is_full)):
            return 1
        size = len(b)
        k = min(int((b.stop_at - b.generated).min()), MAX_WINDOW)
        if self.overlap:  # the overlap loop's own limits (SchedulerOverlapMixin)
            limit = self.window_open_overlap()
            k = 0 if limit is None else min(k, limit)
        if k < max(2, size // 8):
            return 1
        # step j writes position kv_len + j: a new page when (kv_len + j) % p == 0
        first = np.bincount((-b.kv_len) % p, minlength=p)
        need = p * first[np.arange(k) % p]
        cum = np.cumsum(need)
        before = self.allocator.available_size() - np.concatenate(([0], cum[:-1]))
        ask = need if self.tree_cache.evictable_size() == 0 else np.maximum(need, size * p)
        ok = before >= ask
        k = min(k, int(np.argmin(ok)) if not ok.all() else k)
        if not b.batch_is_full and self.next_arrival_s() is not None:
            arrive, kv_sum, clock = self.next_arrival_s(), int(b.kv_len.sum()), self.clock
            for j in range(1, k):  # step j starts at the end of step j - 1
                clock += self.executor.decode_seconds(size, kv_sum + (j - 1) * size)
                if clock >= arrive:
                    k = j
                    break
        return k if k >= 2 else 1

    def fast_forward_steps(self, k: int, overlap: bool = False) -> None:
        """Take ``k`` decode steps: record steps ``0 .. k-2`` here; the caller records the
        last, as for a single step. The first step's memory check and ratio update have
        been done by :meth:`update_running_batch`. ``overlap``: the overlap loop's window
        (its last step logs before its releases, as a launch precedes the previous
        result's processing)."""
        b, p, cfg = self.running, self.allocator.page_size, self.config
        size, available = len(b), self.allocator.available_size()
        kv0, gen0, kv_sum = b.kv_len.copy(), b.generated.copy(), int(b.kv_len.sum())
        need = p * np.bincount((-kv0) % p, minlength=p)[np.arange(k) % p]
        cum = np.cumsum(need)
        pages = self.trace.page_events
        if pages is not None:  # the first step as a single step records it (it may follow a retraction)
            b.decode_many(1)
            pages.record(self, "decode")
        interval = cfg.decode_log_interval
        trial = replace(self.ratio_tracker)  # each step's ratio, after its decay
        ratios = [trial.current]
        for _ in range(k - 1):
            trial.decay_step()
            ratios.append(trial.current)
        reserved = (window_reservations(cfg, p, np.array(ratios[:-1]), b.prompt_len,
                                        b.max_new_tokens, gen0 + 1, kv0 + 1, b.ignore_eos).tolist()
                    if self.trace.records_steps else [0.0] * (k - 1))
        for j in range(k):
            if j:
                self.ratio_tracker.decay_step()  # = ratios[j]
                self.enqueue_arrivals()  # only while batch_is_full: they wait, as in single steps
            self.clock += self.executor.decode_seconds(size, kv_sum + j * size)
            self.decoded += size
            self.num_decode_steps += 1
            if j == k - 1:
                break
            free = available - int(cum[j])
            if self.num_decode_steps % interval == 0:  # evictable is constant here
                self.log_decode(size, self.max_total_num_tokens - free - self.tree_cache.evictable_size())
            self.record_row("decode", kv_sum + (j + 1) * size, reserved[j], free, size)
            self.num_steps += 1
        if pages is None:
            b.decode_many(k)
        else:  # the middle steps are quiet; the caller records the last one
            if k > 2:
                b.decode_many(k - 2)
                pages.record_quiet_decodes(self, self.num_steps - (k - 2), k - 2)
            b.decode_many(1)
        self.process_batch_result_decode(log_first=overlap)
