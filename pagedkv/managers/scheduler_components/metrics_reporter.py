"""What the scheduler reports: SGLang's prefill and decode log lines.

Follows SGLang 0.5.23's ``managers/scheduler_components/metrics_reporter.py``
(``SchedulerMetricsReporter.report_prefill_stats``, ``report_decode_stats``) and 0.5.9's
``scheduler_metrics_mixin.py`` (``log_prefill_stats``, ``log_decode_stats``). The lines are
SGLang's, field for field, in the chosen release's order. Two fields are modelled, not
measured: the throughputs (modelled tokens per modelled second) and ``cuda graph`` (True for a
decode batch of at most ``cuda_graph_max_bs`` requests; pagedkv does not model prefill CUDA
graphs, so False for a prefill).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pagedkv.managers.config import SchedulerConfig
from pagedkv.managers.schedule_policy import PrefillAdder
from pagedkv.managers.scheduler_components.waiting_queue import WaitingQueue
from pagedkv.managers.trace import Trace
from pagedkv.managers.trace_summary import SummaryTrace


@dataclass(slots=True, kw_only=True)
class SchedulerMetricsReporter:
    """Builds SGLang's log lines and hands them to the trace.

    Attributes:
        config: the scheduler's constants and release (the prefill line's field order).
        max_total_num_tokens: slots in the pool (``token usage`` is over it).
        trace: where the lines go; lines it does not keep (``keeps_log`` False) are not built.
        waiting: the waiting queue (``#queue-req``, ``#pending-token``).
        get_tokens_in_use: SGLang's ``#token`` now (``max_total - available - evictable``).
        last_clock, last_decoded: the clock (seconds) and decoded-token count at the last
            decode line: the next line's throughput is over the span since (SGLang's
            ``last_decode_stats_tic`` / ``num_generated_tokens``).
    """

    config: SchedulerConfig
    max_total_num_tokens: int
    trace: Trace | SummaryTrace
    waiting: WaitingQueue
    get_tokens_in_use: Callable[[], int]
    last_clock: float = 0.0
    last_decoded: int = 0

    def report_prefill_stats(self, step: int, adder: PrefillAdder, running_bs: int,
                             extend_tokens: int, seconds: float, chunked_pending: int) -> None:
        """SGLang's prefill line for the pass at ``step`` (after its result was processed).

        Args:
            step: the step that ran the pass.
            adder: the pass's :class:`PrefillAdder` (requests, ``#new-token``,
                ``#cached-token``).
            running_bs: requests running before the pass.
            extend_tokens: tokens the pass computed; seconds: how long it took.
            chunked_pending: tokens of the request being chunked still to prefill (0: none).
        """
        if not self.trace.keeps_log:  # nobody reads the line: do not build it
            return
        rate = extend_tokens / seconds if seconds > 0 else 0.0
        self.trace.add_log(step, prefill_line(
            self.config, len(adder.can_run_list), adder.log_input_tokens, adder.log_hit_tokens,
            self.get_tokens_in_use() / self.max_total_num_tokens, running_bs, len(self.waiting),
            self.waiting.tokens + chunked_pending, rate))

    def report_decode_stats(self, step: int, clock: float, decoded: int, bs: int,
                            tokens_in_use: int | None = None) -> None:
        """SGLang's decode line at ``step``.

        Args:
            step: the step that printed it; clock: seconds now; decoded: tokens decoded so
                far (the throughput is the span since the last line).
            bs: requests in the batch.
            tokens_in_use: ``#token``, evictable tokens left out (as is ``token usage``);
                None: ``get_tokens_in_use()``.
        """
        elapsed = clock - self.last_clock
        rate = (decoded - self.last_decoded) / elapsed if elapsed > 0 else 0.0
        self.last_clock, self.last_decoded = clock, decoded
        if not self.trace.keeps_log:  # nobody reads the line: do not build it
            return
        if tokens_in_use is None:
            tokens_in_use = self.get_tokens_in_use()
        self.trace.add_log(step, decode_line(self.config, bs, tokens_in_use,
                                             tokens_in_use / self.max_total_num_tokens, rate,
                                             len(self.waiting)))


def prefill_line(config: SchedulerConfig, new_seq: int, new_token: int, cached_token: int,
                 usage: float, running_bs: int, queue: int, pending: int, rate: float) -> str:
    """SGLang's prefill line, in ``config``'s release's field order (``#pending-token``:
    0.5.23's ``prefill_log_pending_tokens``); ``usage`` a fraction, ``rate`` tokens/s."""
    head = (f"Prefill batch, #new-seq: {new_seq}, #new-token: {new_token}, "
            f"#cached-token: {cached_token}, token usage: {usage:.2f}, "
            f"#running-req: {running_bs}, #queue-req: {queue}, ")
    if not config.release.prefill_log_pending_tokens:
        return f"{head}input throughput (token/s): {rate:.2f}, cuda graph: False"
    return f"{head}#pending-token: {pending}, cuda graph: False, input throughput (token/s): {rate:.2f}"


def decode_line(config: SchedulerConfig, bs: int, tokens_in_use: int, usage: float, rate: float,
                queue: int) -> str:
    """SGLang's decode line (``cuda graph``: ``bs <= cuda_graph_max_bs``)."""
    graph = bs <= config.cuda_graph_max_bs
    return (f"Decode batch, #running-req: {bs}, #token: {tokens_in_use}, "
            f"token usage: {usage:.2f}, cuda graph: {graph}, gen throughput (token/s): "
            f"{rate:.2f}, #queue-req: {queue}")
