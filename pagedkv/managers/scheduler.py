"""The step loop: each step is a prefill pass, a decode step, or idle, as in SGLang.

Follows ``python/sglang/srt/managers/scheduler.py`` (``event_loop_normal``,
``get_next_batch_to_run``, ``get_new_batch_prefill``, ``update_running_batch``,
``self_check_during_idle``):

1. Requests whose arrival time has passed join the waiting queue (FCFS).
2. ``get_new_batch_prefill``: unless ``batch_is_full`` (and no chunked prefill is pending),
   a :class:`~pagedkv.managers.schedule_policy.PrefillAdder` walks the queue; if it admits anyone,
   the step is a prefill over their prompts (a retracted request: over prompt + output).
3. Otherwise the running batch decodes one token each. First ``check_decode_mem``: if the
   step's new pages do not fit, ``retract_decode`` sends victims back to the END of the
   waiting queue and resets ``new_token_ratio``; if they fit, the ratio decays by
   ``(init - min) / 600`` (floor ``min``).
   ``batch_is_full`` is cleared here when the batch has shrunk since the last check
   (finished requests leave the batch at this point in SGLang, or retracted ones).
4. With nothing to run the server is idle: the ratio goes back to its initial value and the
   clock jumps to the next arrival. This also happens for one step when the last running
   requests finish while ``batch_is_full`` is set: SGLang's ``update_running_batch`` finds
   the batch empty, clears the flag and the loop runs ``self_check_during_idle``.

Where we simplify: no radix cache (nothing is cached or evictable); no overlap scheduling;
requests must fit the pool on their own
(``ceil_to_page(prompt_len + max_new_tokens) < max_total_num_tokens``), where SGLang would
reject or truncate them at the tokenizer.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import numpy as np

from pagedkv.errors import bad_value, check_positive_int
from pagedkv.managers.config import SchedulerConfig
from pagedkv.managers.fastforward import fast_forward, window_length
from pagedkv.managers.prefill import get_new_batch_prefill, run_prefill
from pagedkv.managers.request import Req, RequestLike
from pagedkv.managers.schedule_batch import RunningBatch
from pagedkv.managers.schedule_policy import ceil_to_page, running_reservation
from pagedkv.managers.trace import Trace, TraceMeta
from pagedkv.mem_cache.allocator import PagedTokenToKVPoolAllocator, TokenToKVPoolAllocator
from pagedkv.mem_cache.memory_pool import ReqToTokenPool
from pagedkv.model_executor.sim_executor import FixedStepTime, StepTime


class Scheduler:
    """Simulates SGLang's scheduler over a fixed list of requests.

    Args:
        requests: workload entries (``prompt_len``, ``output_len``, ``max_new_tokens``,
            ``arrival_s``); request ``i`` gets ``rid = i``.
        max_total_num_tokens: KV slots in the pool, a multiple of ``page_size``.
        page_size: tokens per page.
        config: constants and policy (default: SGLang's, see :class:`SchedulerConfig`); its
            ``max_running_requests`` defaults to ``min(max_total_num_tokens // 2, 4096)``
            (SGLang: ``min(tokens // 2, req_to_token pool size)``, the pool at most 4096 rows).
        step_time: seconds per step (default: 10 ms fixed; ``simulate`` uses the roofline).
        meta: the trace's ``meta`` block (default: built from the pool size).
        record_page_tables: keep every step's page tables in the trace (small pools only).
        fast_forward: take decode steps between events together (see
            :mod:`pagedkv.managers.fastforward`); the trace is the same either way.

    Raises:
        ConfigError: a pool size, page size or request outside its range; a request that
            cannot fit the pool on its own.
    """

    def __init__(self, requests: Sequence[RequestLike], *, max_total_num_tokens: int,
                 page_size: int = 1, config: SchedulerConfig | None = None,
                 step_time: StepTime | None = None, meta: TraceMeta | None = None,
                 record_page_tables: bool = False, fast_forward: bool = True) -> None:
        self.page_size = p = check_positive_int("page_size", page_size)
        self.config = config or SchedulerConfig()
        self.max_total_num_tokens = check_positive_int("max_total_num_tokens",
                                                       max_total_num_tokens, minimum=p)
        chunk = self.config.chunked_prefill_size
        if chunk is not None and chunk < p:
            raise bad_value("chunked_prefill_size", chunk, f"None or an integer >= page_size={p}")
        self.reqs = [Req.from_spec(i, spec) for i, spec in enumerate(requests)]
        for r in self.reqs:
            if ceil_to_page(r.prompt_len + r.max_new_tokens, p) >= max_total_num_tokens:
                raise bad_value(f"request {r.rid} prompt_len + max_new_tokens",
                                r.prompt_len + r.max_new_tokens,
                                f"< max_total_num_tokens={max_total_num_tokens} after rounding "
                                f"up to pages of {p}")
        self.max_running_requests = (self.config.max_running_requests
                                     or min(max(1, max_total_num_tokens // 2), 4096))
        self.allocator = (TokenToKVPoolAllocator(max_total_num_tokens) if p == 1
                          else PagedTokenToKVPoolAllocator(max_total_num_tokens, p))
        longest = max((r.prompt_len + r.max_new_tokens for r in self.reqs), default=1)
        self.req_to_token_pool = ReqToTokenPool(self.max_running_requests + 1, longest)
        self.step_time = step_time or FixedStepTime()
        self.fast_forward = fast_forward
        self.trace = Trace(meta or TraceMeta(max_total_num_tokens, p,
                                             policy=self.config.policy.value),
                           record_page_tables)
        self.arrivals = sorted(self.reqs, key=lambda r: (r.arrival_s, r.rid))
        self.next_arrival = 0
        self.waiting: deque[Req] = deque()
        self.running = RunningBatch()
        self.chunked_req: Req | None = None
        self.new_token_ratio = self.config.init_ratio
        self.clock = 0.0
        self.num_steps = 0
        self.num_decode_steps = 0
        self.num_finished = 0
        self.shrunk = False  # requests left the batch since update_running_batch last ran
        self._log_clock, self._log_tokens, self.decoded = 0.0, 0, 0  # decode log state

    # ----- queries ------------------------------------------------------------------------
    @property
    def tokens_used(self) -> int:
        """KV slots holding a token: running requests plus a request being chunked."""
        chunked = self.chunked_req.kv_len if self.chunked_req is not None else 0
        return int(self.running.kv_len.sum()) + chunked

    @property
    def tokens_reserved(self) -> float:
        """What admission holds back for running requests (``running_reservation``)."""
        b = self.running
        return running_reservation(self.config, self.page_size, self.new_token_ratio,
                                   b.prompt_len, b.max_new_tokens, b.generated, b.kv_len)

    def done(self) -> bool:
        """Whether every request has finished."""
        return self.num_finished == len(self.reqs)

    # ----- the loop -----------------------------------------------------------------------
    def run(self) -> Trace:
        """Step until every request has finished; return the trace."""
        while self.step():
            pass
        return self.trace

    def step(self) -> bool:
        """Run one step (prefill, decode or idle) and record it; False once all are done."""
        if self.done():
            return False
        self.enqueue_arrivals()
        adder = get_new_batch_prefill(self)
        if adder is not None:
            kind = "prefill"
            run_prefill(self, adder)
        elif len(self.running):
            kind = "decode"
            self._run_decode()
        elif self.shrunk:  # update_running_batch finds the batch empty: idle, clock unchanged
            kind = "idle"
            self.shrunk = self.running.batch_is_full = False
            self.new_token_ratio = self.config.init_ratio
        else:
            kind = "idle"
            self._idle()
        self._record(kind)
        self.num_steps += 1
        return True

    def enqueue_arrivals(self) -> None:
        """Move requests whose arrival time has passed into the waiting queue."""
        while (self.next_arrival < len(self.arrivals)
               and self.arrivals[self.next_arrival].arrival_s <= self.clock):
            self.waiting.append(self.arrivals[self.next_arrival])
            self.next_arrival += 1

    def _idle(self) -> None:
        """``self_check_during_idle``: reset the ratio; jump the clock to the next arrival."""
        self.new_token_ratio = self.config.init_ratio
        self.running.batch_is_full = False
        if not self.waiting and self.next_arrival < len(self.arrivals):
            self.clock = max(self.clock, self.arrivals[self.next_arrival].arrival_s)

    def _run_decode(self) -> None:
        """``update_running_batch`` (memory check, retract or decay) and one decode step."""
        p, batch = self.page_size, self.running
        available = self.allocator.available_size()
        must_retract = batch.new_tokens_required_next_decode(p) > available
        if must_retract:
            victims, ratio = batch.retract_decode(available, p, self.config.retract_decode_steps)
            retracted = batch.remove(victims)
            freed = [r.kv_len for r in retracted]
            self._release(retracted)
            for req, kv_len in zip(retracted, freed, strict=True):
                self.trace.event(self.num_steps, "retract", req.rid,
                                 {"output_len": req.generated, "freed": kv_len})
                req.enqueued_s = self.clock
                self.waiting.append(req)
            self.trace.add_log(self.num_steps, f"KV cache pool is full. Retract requests. "
                                               f"#retracted_reqs: {len(retracted)}, "
                                               f"#new_token_ratio: {self.new_token_ratio:.4f} "
                                               f"-> {ratio:.4f}")
            self.new_token_ratio = ratio
        else:
            self.new_token_ratio = max(self.new_token_ratio - self.config.ratio_decay,
                                       self.config.min_ratio)
        if self.shrunk or must_retract:
            batch.batch_is_full = self.shrunk = False
        steps, cum = window_length(self) if self.fast_forward and not must_retract else (1, None)
        if steps > 1:
            fast_forward(self, steps, cum)
        else:
            self.clock += self.step_time.decode_s(len(batch), int(batch.kv_len.sum()))
            batch.decode(self.allocator, self.req_to_token_pool)
            self.decoded += len(batch)
            self.num_decode_steps += 1
        self.shrunk = self.finish(batch.generated >= batch.output_len) > 0
        if self.num_decode_steps % self.config.decode_log_interval == 0:
            self.log_decode(self.max_total_num_tokens - self.allocator.available_size())

    def finish(self, mask: np.ndarray) -> int:
        """Release the requests where ``mask`` is True, which have finished; return how many."""
        finished = self.running.remove(mask)
        self._release(finished)
        for req in finished:
            req.finish_s = self.clock
            self.trace.event(self.num_steps, "finish", req.rid, {"output_len": req.generated})
        self.num_finished += len(finished)
        return len(finished)

    def _release(self, reqs: list[Req]) -> None:
        """Free the KV slots and ``req_to_token`` rows of requests leaving the batch."""
        if not reqs:
            return
        table = self.req_to_token_pool.req_to_token.numpy()
        self.allocator.free(np.concatenate([table[r.req_pool_idx, :r.kv_len] for r in reqs]))
        self.req_to_token_pool.free([r.req_pool_idx for r in reqs])
        for r in reqs:
            if not r.finished:
                r.num_retractions += 1
                r.recomputed_tokens += r.kv_len
            r.req_pool_idx, r.kv_len = -1, 0

    def log_decode(self, used: int) -> None:
        """Add SGLang's "Decode batch." line; ``used`` = pool slots not free (whole pages)."""
        elapsed = self.clock - self._log_clock
        rate = (self.decoded - self._log_tokens) / elapsed if elapsed > 0 else 0.0
        self._log_clock, self._log_tokens = self.clock, self.decoded
        self.trace.add_log(self.num_steps, f"Decode batch. #running-req: {len(self.running)}, "
                                           f"#token: {used}, token usage: "
                                           f"{used / self.max_total_num_tokens:.2f}, gen "
                                           f"throughput (token/s): {rate:.2f}, #queue-req: "
                                           f"{len(self.waiting)}")

    def _record(self, kind: str) -> None:
        free = self.allocator.available_size()
        running = len(self.running) + (self.chunked_req is not None)
        self.trace.record_step(self.num_steps, self.clock, kind, self.tokens_used,
                               self.tokens_reserved, free,
                               (self.max_total_num_tokens - free) // self.page_size, running,
                               len(self.waiting), self.new_token_ratio)
        if self.trace.page_tables is not None:
            self.trace.page_tables.append(self._page_tables())

    def _page_tables(self) -> list[list[object]]:
        """``[[rid, kv_len, [page ids]], ...]`` for the running batch and a chunked request."""
        self.running.sync()
        reqs = self.running.reqs + ([self.chunked_req] if self.chunked_req is not None else [])
        table, p = self.req_to_token_pool.req_to_token, self.page_size
        return [[r.rid, r.kv_len, (table[r.req_pool_idx, :r.kv_len:p] // p).tolist()]
                for r in reqs]

    def check_invariants(self) -> None:
        """Allocator and pool invariants, plus the scheduler's own bookkeeping.

        Raises:
            AssertionError: used slots disagree with the requests' ``kv_len``, a budget is
                negative, or a request is neither waiting, running, pending nor finished.
        """
        self.allocator.check_invariants()
        self.req_to_token_pool.check_invariants()
        p = self.page_size
        self.running.sync()
        holders = self.running.reqs + ([self.chunked_req] if self.chunked_req else [])
        pages = sum(-(-r.kv_len // p) for r in holders)
        free = self.allocator.available_size()
        assert pages * p + free == self.max_total_num_tokens, (pages, free)
        assert free >= 0 and self.tokens_reserved >= 0 and self.new_token_ratio > 0
        pending = len(self.arrivals) - self.next_arrival
        assert (len(self.waiting) + len(self.running) + pending + self.num_finished
                + (self.chunked_req is not None) == len(self.reqs))
        assert len(self.running) <= self.max_running_requests
