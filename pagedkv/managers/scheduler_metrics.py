"""What the scheduler reports: SGLang's log lines and the trace's rows.

Follows SGLang's ``python/sglang/srt/managers/scheduler_metrics_mixin.py`` (0.5.9:
``log_prefill_stats``, ``log_decode_stats``) and
``scheduler_components/metrics_reporter.py`` (0.5.23: ``report_prefill_stats``,
``report_decode_stats``). The lines are SGLang's, field for field, in the chosen release's
order. Two fields are modelled, not measured: the throughputs (modelled tokens per modelled
second) and ``cuda graph`` (True for a decode batch of at most ``cuda_graph_max_bs``
requests; pagedkv does not model prefill CUDA graphs, so False for a prefill). A mixin of
:class:`~pagedkv.managers.scheduler.Scheduler`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pagedkv.managers.scheduler_state import SchedulerState
from pagedkv.managers.trace import StepRow


class SchedulerMetricsMixin(SchedulerState):
    """Log lines and trace rows (state lives on the scheduler)."""

    def log_prefill(self, adder: Any, running_bs: int, extend_tokens: int, seconds: float) -> None:
        """SGLang's prefill line, after the pass's result was processed."""
        if not self.trace.keeps_log:  # nobody reads the line: do not build it
            return
        n = len(adder.can_run_list)
        rate = extend_tokens / seconds if seconds > 0 else 0.0
        head = (f"Prefill batch, #new-seq: {n}, #new-token: {adder.log_input_tokens}, "
                f"#cached-token: {adder.log_hit_tokens}, token usage: {self.token_usage():.2f}, "
                f"#running-req: {running_bs}, #queue-req: {len(self.waiting)}, ")
        if not self.config.release.prefill_log_pending_tokens:
            line = f"{head}input throughput (token/s): {rate:.2f}, cuda graph: False"
        else:
            pending = self.waiting_tokens
            if self.chunked_req is not None:
                c = self.chunked_req
                pending += c.fill_len - c.kv_committed_len
            line = (f"{head}#pending-token: {pending}, cuda graph: False, "
                    f"input throughput (token/s): {rate:.2f}")
        self.trace.add_log(self.num_steps, line)

    def log_decode(self, bs: int, used: int | None = None) -> None:
        """SGLang's decode line. ``#token`` (default: :meth:`tokens_in_use`) and
        ``token usage`` leave out evictable tokens."""
        elapsed = self.clock - self._log_clock
        rate = (self.decoded - self._log_tokens) / elapsed if elapsed > 0 else 0.0
        self._log_clock, self._log_tokens = self.clock, self.decoded
        if not self.trace.keeps_log:  # nobody reads the line: do not build it
            return
        used = self.tokens_in_use() if used is None else used
        graph = bs <= self.config.cuda_graph_max_bs
        self.trace.add_log(self.num_steps, f"Decode batch, #running-req: {bs}, #token: {used}, "
                                           f"token usage: {used / self.max_total_num_tokens:.2f}, "
                                           f"cuda graph: {graph}, gen throughput (token/s): "
                                           f"{rate:.2f}, #queue-req: {len(self.waiting)}")

    def record(self, kind: str) -> None:
        """Append this step's row (and page tables) to the trace. ``tokens_reserved`` is
        worked out only for a trace that keeps rows (a summary trace does not read it)."""
        b, chunked = self.running, self.chunked_req
        if b.finished.any():  # (0.5.9) finished requests wait in the batch: not counted
            live_mask = ~b.finished
            live, used = int(np.count_nonzero(live_mask)), int(b.kv_len[live_mask].sum())
        else:
            live, used = len(b), int(b.kv_len.sum())
        if chunked is not None:
            live, used = live + 1, used + chunked.kv_committed_len
        reserved = self.tokens_reserved if self.trace.records_steps else 0.0
        self.record_row(kind, used, reserved, self.allocator.available_size(), live)
        if self.trace.page_tables is not None:
            self.trace.page_tables.append(self._page_tables())
        if self.trace.page_events is not None:
            self.trace.page_events.record(self, kind)

    def record_row(self, kind: str, used: int, reserved: float, free: int, running: int) -> None:
        """One trace row; the tree's split is read now (it does not change within a window)."""
        self.trace.record_step(StepRow(
            self.num_steps, self.clock, kind, used, reserved, free,
            (self.max_total_num_tokens - free) // self.page_size, running, len(self.waiting),
            self.new_token_ratio, self.tree_cache.evictable_size(),
            self.tree_cache.protected_size()))

    def _page_tables(self) -> list[list[object]]:
        """``[[rid, kv_len, [page ids]], ...]`` for the live running batch and a chunked
        request."""
        b = self.running
        b.sync()
        reqs = [r for r, f in zip(b.reqs, b.finished.tolist(), strict=True) if not f]
        if self.chunked_req is not None:
            reqs.append(self.chunked_req)
        table, p = self.req_to_token_pool.req_to_token, self.page_size
        return [[r.rid, r.kv_committed_len, (table[r.req_pool_idx, :r.kv_committed_len:p] // p).tolist()]
                for r in reqs]

