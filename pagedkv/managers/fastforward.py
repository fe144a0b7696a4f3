"""Fast-forward: decode steps between two events, computed together and exactly.

Between events (a request finishing, an arrival that would trigger a prefill attempt, the
pool running short) SGLang's loop does the same thing every step: decay ``new_token_ratio``,
give every running request one more slot, sample one more token. The simulator can then do
``k`` steps with one ``alloc_extend`` call instead of ``k`` ``alloc_decode`` calls and work
out each step's trace row arithmetically. Every count in the trace (tokens, pages, ratio,
time, log lines) is what ``k`` single steps give; only the page ids differ, so the window is
not used when page tables are recorded.

A window of ``k`` decode steps is taken only when

- no chunked prefill is pending and no prefill attempt would happen before its last step
  (``batch_is_full`` is set, or the queue is empty and nobody arrives in time);
- no request finishes before its last step (finishes shrink the batch and clear
  ``batch_is_full``);
- its pages fit the free pages without any frees (so no step could need a retraction);
- it is long enough to pay for ``alloc_extend``'s loop over requests (``k >= batch / 8``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from pagedkv.managers.schedule_policy import running_reservation

if TYPE_CHECKING:
    from pagedkv.managers.scheduler import Scheduler

MAX_WINDOW = 4096  # decode steps per window at most


def window_length(s: Scheduler) -> tuple[int, np.ndarray]:
    """How many decode steps, from this one, can be taken together; and their cumulative
    slot needs (int64 ``[k]``). Returns ``(1, ...)`` when a window does not apply."""
    b, p = s.running, s.page_size
    none = (1, np.zeros(1, dtype=np.int64))
    if (s.trace.page_tables is not None or s.chunked_req is not None
            or (s.waiting and not b.batch_is_full)):
        return none
    size = len(b)
    k = min(int((b.output_len - b.generated).min()), MAX_WINDOW)
    if k < max(2, size // 8):
        return none
    # step j writes position kv_len + j: a new page when (kv_len + j) % p == 0
    first = np.bincount((-b.kv_len) % p, minlength=p)
    need = p * first[np.arange(k) % p]
    cum = np.cumsum(need)
    k = min(k, int(np.searchsorted(cum, s.allocator.available_size(), side="right")))
    if not b.batch_is_full and s.next_arrival < len(s.arrivals):
        arrive, kv_sum, clock = s.arrivals[s.next_arrival].arrival_s, int(b.kv_len.sum()), s.clock
        for j in range(1, k):  # step j starts at the end of step j - 1
            clock += s.step_time.decode_s(size, kv_sum + (j - 1) * size)
            if clock >= arrive:
                k = j
                break
    return (k, cum[:k]) if k >= 2 else none


def fast_forward(s: Scheduler, k: int, cum: np.ndarray) -> None:
    """Take ``k`` decode steps: record steps ``0 .. k-2`` here, leave the last to the caller.

    On return the clock, ratio and counters are those after step ``k - 1``'s decode, before
    its finishes and its trace row (the caller does both, as for a single step).
    """
    b, p, cfg = s.running, s.page_size, s.config
    size, available = len(b), s.allocator.available_size()
    kv0, gen0, kv_sum = b.kv_len.copy(), b.generated.copy(), int(b.kv_len.sum())
    for j in range(k):
        if j:
            s.new_token_ratio = max(s.new_token_ratio - cfg.ratio_decay, cfg.min_ratio)
            s.enqueue_arrivals()  # only while batch_is_full: they wait, as in single steps
        s.clock += s.step_time.decode_s(size, kv_sum + j * size)
        s.decoded += size
        s.num_decode_steps += 1
        if j == k - 1:
            break
        free = available - int(cum[j])
        if s.num_decode_steps % cfg.decode_log_interval == 0:
            s.log_decode(s.max_total_num_tokens - free)
        reserved = running_reservation(cfg, p, s.new_token_ratio, b.prompt_len,
                                       b.max_new_tokens, gen0 + j + 1, kv0 + j + 1)
        s.trace.record_step(s.num_steps, s.clock, "decode", kv_sum + (j + 1) * size, reserved,
                            free, (s.max_total_num_tokens - free) // p, size, len(s.waiting),
                            s.new_token_ratio)
        s.num_steps += 1
    b.decode_many(s.allocator, s.req_to_token_pool, k)
