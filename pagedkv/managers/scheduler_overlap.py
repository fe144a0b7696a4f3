"""The overlap loop (SGLang's default): one batch in flight, its result processed a step later.

Follows SGLang 0.5.23's ``Scheduler.event_loop_overlap`` (``python/sglang/srt/managers/
scheduler.py``) with ``get_next_batch_to_run``, ``update_running_batch``
(``_reqs_finishing_inflight``), ``is_disable_overlap_for_batch`` and
``scheduler_components/batch_result_processor.py`` (``process_batch_result_prefill`` /
``_decode``). A mixin of :class:`~pagedkv.managers.scheduler.Scheduler`;
``SchedulerConfig(disable_overlap_schedule=True)`` (``--disable-overlap-schedule``) runs the
non-overlapped loop instead.

While the GPU runs batch ``N``, the CPU schedules batch ``N + 1``; batch ``N``'s result is
processed only after batch ``N + 1`` is launched. One step here is one iteration of that loop:

1. Arrivals join the queue; the chunked request's chunk is cached in the tree; the last
   prefill's requests (all but the chunked one) join the running batch before their first
   token is known; finished requests leave it.
2. A prefill pass, or else a decode step, is scheduled and launched. Scheduling sees the
   requests of the in-flight batch one token short (``generated`` lags: the retraction
   order, the post-retraction ratio and admission's reservation read it) while their KV
   is ahead: a decode step allocates each request's next slot before the token that goes
   there is known (``kv_committed_len`` counts it; in 0.5.23 without speculative decoding
   ``kv_allocated_len`` equals it).
3. The previous batch's result is processed: tokens are committed, finished requests
   release their KV. A request that sampled EOS in batch ``N`` has already been given a
   slot in batch ``N + 1``: it is seen finished one step late and its KV (that slot
   included) is held a step longer. A request retracted while its batch was in flight has
   that result dropped (``is_retracted``).
4. No batch to launch: the previous result is processed; only when there is none either
   is the server idle (``on_idle``).

0.5.23 leaves out of the next decode step the requests whose in-flight result reaches
``max_new_tokens``, and when the step does not fit while such requests are finishing it
skips the step rather than retracting (the result frees their KV at the end of the step):
``Release.skip_finishing_decode_in_flight``. Where SGLang processes the previous result
before launching (``is_disable_overlap_for_batch``): two prefills in a row with
``SGLANG_DISABLE_CONSECUTIVE_PREFILL_OVERLAP`` (``config.disable_consecutive_prefill_overlap``);
its other case needs speculative decoding with a grammar, which pagedkv does not run.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pagedkv.managers.req import Req
from pagedkv.managers.scheduler_components.decode_fast_forward import MAX_WINDOW
from pagedkv.managers.scheduler_state import SchedulerState
from pagedkv.mem_cache.common import release_kv_cache
from pagedkv.model_executor.forward_batch_info import ForwardBatch


@dataclass
class InFlight:
    """A launched batch whose result has not been processed (SGLang's ``result_queue``
    entry): the pass, its sampled tokens (None: the simulator samples none), for a decode
    step its number (for the decode log), and ``end_s``, the clock (seconds) at which the
    pass ends: its tokens exist from then, though the loop processes them after launching
    the next pass."""

    batch: ForwardBatch
    tokens: np.ndarray | None
    decode_step: int = 0
    end_s: float = 0.0

    def token(self, i: int) -> int | None:
        """Request ``i``'s sampled token, or None."""
        return None if self.tokens is None else int(self.tokens[i])


class SchedulerOverlapMixin(SchedulerState):
    """The overlap loop's step and result processing (state lives on the scheduler)."""

    in_flight: InFlight | None

    def step_overlap(self) -> bool:
        """One iteration of ``event_loop_overlap`` (see the module docstring)."""
        self.enqueue_arrivals()
        self.prepare_step()
        self.merge_in_flight_prefill()
        kind, batch = "idle", None
        running_bs = len(self.running)
        adder = self.get_new_batch_prefill()
        if adder is not None:
            kind, batch = "prefill", self.prepare_prefill(adder)
        elif len(self.running) and self.update_running_batch():
            ff = self.fast_forward
            steps = 1 if ff is None else ff.window_length(
                self.running, self.chunked_req, self.clock, self.window_open_overlap())
            if steps > 1:  # many quiet steps at once (the simulator; exact, see below)
                self.fast_forward_overlap(steps)
                self.record("decode")
                self.num_steps += 1
                return True
            kind, batch = "decode", self.prepare_decode_overlap()
        previous, self.in_flight = self.in_flight, None
        if (previous is not None and batch is not None and batch.mode == "extend"
                and previous.batch.mode == "extend"
                and self.config.disable_consecutive_prefill_overlap):
            self.process_in_flight(previous)  # is_disable_overlap_for_batch
            previous = None
        if batch is not None:
            result = self.executor.forward(batch)
            self.clock += result.seconds
            self._idle_blocked = 0
            self.in_flight = InFlight(batch, result.next_token_ids, self.num_decode_steps,
                                      self.clock)
            if kind == "prefill":
                self.log_prefill(adder, running_bs, int(batch.extend_lens.sum()), result.seconds)
            elif self.num_decode_steps % self.config.decode_log_interval == 0:
                self.log_decode(len(batch.reqs))
        if previous is not None:
            self.process_in_flight(previous)
            if batch is None:
                self.jump_to_next_arrival()
        elif batch is None:
            self.on_idle()
        self.record(kind)
        self.num_steps += 1
        return True

    def merge_in_flight_prefill(self) -> None:
        """``get_next_batch_to_run``: the in-flight prefill's requests, all but the one
        still being chunked, join the running batch before their first token is known.
        A pass that lost a request to chunking, or an empty running batch, clears
        ``batch_is_full``."""
        f = self.in_flight
        if f is None or f.batch.mode != "extend":
            return
        done = [r for r in f.batch.reqs if r is not self.chunked_req and not r.finished]
        running = self.running
        if len(done) < len(f.batch.reqs) or not len(running):
            running.batch_is_full = False
        running.merge(done)

    def finishing_in_flight(self) -> list[int]:
        """Running-batch indices of requests whose in-flight result reaches
        ``max_new_tokens`` (0.5.23's ``_reqs_finishing_inflight``; none in 0.5.9 or
        without a batch in flight)."""
        f = self.in_flight
        if f is None or not self.config.release.skip_finishing_decode_in_flight:
            return []
        queued = {id(r) for r in f.batch.reqs}
        b = self.running
        ends = (b.generated + 1 >= b.max_new_tokens).tolist()
        return [i for i, r in enumerate(b.reqs) if ends[i] and id(r) in queued]

    def prepare_decode_overlap(self) -> ForwardBatch:
        """``prepare_for_decode`` for the overlap loop: every request's next slot is
        allocated now; its token is committed when the result is processed."""
        batch = self.running
        kv_tokens = int(batch.kv_len.sum())
        bs = len(batch)
        batch.prepare_for_decode()
        self.decoded += bs
        self.num_decode_steps += 1
        ids = None
        if self.real_tokens:  # the in-flight pass's tokens (SGLang's future map)
            f = self.in_flight
            pending = ({} if f is None or f.tokens is None else
                       {id(r): int(t) for r, t, s in zip(f.batch.reqs, f.tokens.tolist(),
                                                         f.batch.sample.tolist(), strict=True) if s})
            ids = np.fromiter((pending.get(id(r), r.output_ids[-1] if r.output_ids else -1)
                               for r in batch.reqs), np.int64, bs)
        return ForwardBatch("decode", list(batch.reqs), batch.req_pool_idx.copy(),
                            batch.kv_len - 1, np.ones(bs, dtype=np.int64), batch.last_loc.copy(),
                            np.ones(bs, dtype=bool), kv_tokens, self.req_to_token_pool, ids)

    # ----- the previous batch's result ------------------------------------------------------
    def process_in_flight(self, f: InFlight) -> None:
        """``process_batch_result``: commit the pass's tokens; release who finished.

        First tokens and finishes are timed at ``f.end_s``, when the pass ended: SGLang
        processes the result as soon as the GPU has finished it (``copy_done``), while the
        next pass runs, not at the end of that next pass."""
        now, self.clock = self.clock, f.end_s
        if f.batch.mode == "extend":
            self._process_prefill_result(f)
        else:
            self._process_decode_result(f)
        self.clock = now

    def _commit(self, req: Req, token: int | None, index: dict[int, int]) -> bool:
        """``req`` gets its sampled token (in the running batch's arrays if it is there);
        True if that ends it (then marked finished, its KV lengths synced)."""
        b = self.running
        i = index.get(id(req))
        if i is not None:
            b.generated[i] += 1
            b.sync([i])
        else:
            req.generated += 1
        if token is not None:
            req.output_ids.append(token)
        eos = token is not None and self.batch_result_processor.hit_eos(req)
        reason = req.should_stop() or ("stop" if eos else "")
        if reason:
            req.finished, req.finish_reason = True, reason
            if i is not None:
                b.finished[i] = True
        return bool(reason)

    def _process_prefill_result(self, f: InFlight) -> None:
        """Requests whose prompt is complete commit their first token; each is cached up
        to the pass's extend end (``checkpoint_kv_cache``) or, if that token ends it,
        released. Retracted requests' results are dropped."""
        group = self.config.release.group_prefill_frees
        if group:
            self.allocator.free_group_begin()
        b = self.running
        index = {id(r): i for i, r in enumerate(b.reqs)}
        table = self.req_to_token_pool.req_to_token.numpy()
        ends = (f.batch.prefix_lens + f.batch.extend_lens).tolist()
        sampled = 0
        for i, req in enumerate(f.batch.reqs):
            if not f.batch.sample[i] or req.finished or req.is_retracted:
                continue
            sampled += 1
            if req.first_token_s is None:
                req.first_token_s = self.clock
            if self._commit(req, f.token(i), index):
                release_kv_cache(req, self.tree_cache, self.req_to_token_pool, is_insert=True)
                self.on_finish(req)
            else:
                self.tree_cache.cache_unfinished_req(req, up_to=ends[i])
                j = index.get(id(req))
                if j is not None:  # the tree may have repointed the row to its own pages
                    b.last_loc[j] = table[req.req_pool_idx, b.kv_len[j] - 1]
        if group:
            self.allocator.free_group_end()
        self.decoded += sampled

    def _process_decode_result(self, f: InFlight) -> None:
        """Each request still live commits its token; those it ends release their KV (one
        free group). A request already finished (seen a step late) or retracted is skipped:
        its slot of this step was freed with the rest of its KV."""
        b = self.running
        index = {id(r): i for i, r in enumerate(b.reqs)}
        self.allocator.free_group_begin()
        for i, req in enumerate(f.batch.reqs):
            if req.finished or req.is_retracted:
                continue
            if self._commit(req, f.token(i), index):
                release_kv_cache(req, self.tree_cache, self.req_to_token_pool, is_insert=True)
                self.on_finish(req)
        self.allocator.free_group_end()

    # ----- many decode steps at once (the simulator) ----------------------------------------
    def window_open_overlap(self) -> int | None:
        """The most decode steps a window may take in the overlap loop (None: no window).

        Beyond the normal loop's conditions (:meth:`DecodeFastForward.window_length`), the
        batch in flight must be a decode step over exactly the running requests, so that
        each step of the window commits one token for every one of them; and (0.5.23) no
        request may reach the step at which it would be left out of the next decode step
        (``generated + 1 >= max_new_tokens`` for the in-flight result): ``k <=
        max_new_tokens - generated - 1``. The tokens committed inside the window are the
        in-flight one and those of its first ``k - 1`` steps, so nobody stops before the
        window's last step (``k <= stop_at - generated``, as in the normal loop).
        """
        f, b = self.in_flight, self.running
        if (f is None or f.batch.mode != "decode" or len(f.batch.reqs) != len(b.reqs)
                or any(x is not y for x, y in zip(f.batch.reqs, b.reqs, strict=True))):
            return None
        if not self.config.release.skip_finishing_decode_in_flight:
            return MAX_WINDOW
        return int((b.max_new_tokens - b.generated - 1).min())

    def fast_forward_overlap(self, k: int) -> None:
        """Take ``k`` decode steps of the overlap loop at once: the same slots, counts,
        rows and log lines as ``k`` single steps. The caller records the last step.

        Each step allocates its slots and commits the previous step's tokens; over the
        window that is ``k`` slots and ``k`` tokens per request (the in-flight one and
        those of the window's first ``k - 1`` steps), which is what the normal loop's
        window does (:meth:`fast_forward_steps`). Its last step logs at launch, then
        releases whoever the last committed token ends; the window's last step stays in
        flight.
        """
        b = self.running
        self.fast_forward_steps(k, overlap=True)
        self.in_flight = InFlight(
            ForwardBatch("decode", list(b.reqs), b.req_pool_idx.copy(), b.kv_len - 1,
                         np.ones(len(b), dtype=np.int64), b.last_loc.copy(),
                         np.ones(len(b), dtype=bool), int(b.kv_len.sum()) - len(b)),
            None, self.num_decode_steps, self.clock)
