"""Summary numbers of one simulated run.

Times are in modeled seconds (see :mod:`pagedkv.model_executor.sim_executor`: a roofline model, not a
measurement); token counts are tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from pagedkv.managers.req import Req
from pagedkv.managers.trace import Trace
from pagedkv.managers.trace_summary import SummaryTrace


@dataclass(frozen=True)
class Metrics:
    """What a run achieved and what it cost.

    Attributes:
        num_requests: requests submitted (all finish).
        num_steps, num_prefill_steps, num_decode_steps, num_idle_steps: step counts.
        request_steps: (request, step) pairs that did work: one per sampled token plus
            one per chunk of a chunked prefill (what the simulator's speed is counted in).
        output_tokens: tokens generated (each request's output, ``max_new_tokens`` as SGLang
            clamps it at arrival included).
        duration_s: modeled time from 0 to the last finish.
        tokens_per_step: ``output_tokens / (prefill + decode steps)``.
        output_tokens_per_s: ``output_tokens / duration_s``.
        num_retractions: requests sent back by ``retract_decode`` (a request may count twice).
        retraction_events: decode steps that retracted (log lines).
        recomputed_tokens: KV tokens freed by retraction and computed again (less what
            the re-prefills found in the radix cache).
        mean_queue_s, p50_queue_s, p99_queue_s: time spent in the waiting queue per request,
            arrival to first admission plus every wait after a retraction.
        mean_ttft_s: arrival to first token. mean_latency_s: arrival to finish. A later
            turn of a conversation arrives no earlier than the turn before it finished
            (``Req.arrival_s``).
        peak_tokens_used: most KV slots holding tokens at once.
        peak_usage: the most of the pool in use at once, as SGLang's ``token usage`` counts it:
            ``(max_total_num_tokens - available - evictable) / max_total_num_tokens`` (cached
            tokens no running request uses count as free: they are reclaimed on demand).
        mean_usage: the same, averaged over non-idle steps.
    """

    num_requests: int
    num_steps: int
    num_prefill_steps: int
    num_decode_steps: int
    num_idle_steps: int
    request_steps: int
    output_tokens: int
    duration_s: float
    tokens_per_step: float
    output_tokens_per_s: float
    num_retractions: int
    retraction_events: int
    recomputed_tokens: int
    mean_queue_s: float
    p50_queue_s: float
    p99_queue_s: float
    mean_ttft_s: float
    mean_latency_s: float
    peak_tokens_used: int
    peak_usage: float
    mean_usage: float

    @classmethod
    def from_run(cls, reqs: Sequence[Req], trace: Trace | SummaryTrace) -> Metrics:
        """Compute the metrics of a finished run from its requests and trace (either kind:
        both give the same :class:`~pagedkv.managers.trace.StepTotals`)."""
        t = trace.totals()
        pool = max(trace.meta.max_total_num_tokens, 1)
        queue = np.asarray([r.queue_s for r in reqs]) if reqs else np.zeros(1)
        arrival = np.asarray([r.arrival_s for r in reqs]) if reqs else np.zeros(1)
        first = np.asarray([r.first_token_s for r in reqs], dtype=float) if reqs else arrival
        finish = np.asarray([r.finish_s for r in reqs], dtype=float) if reqs else arrival
        output = sum(r.generated for r in reqs)
        work_steps = t.num_prefill_steps + t.num_decode_steps
        duration = float(finish.max()) if reqs else 0.0
        return cls(
            num_requests=len(reqs),
            num_steps=t.num_steps,
            num_prefill_steps=t.num_prefill_steps,
            num_decode_steps=t.num_decode_steps,
            num_idle_steps=t.num_idle_steps,
            request_steps=output + t.chunk_events,
            output_tokens=output,
            duration_s=duration,
            tokens_per_step=output / work_steps if work_steps else 0.0,
            output_tokens_per_s=output / duration if duration > 0 else 0.0,
            num_retractions=sum(r.num_retractions for r in reqs),
            retraction_events=t.retraction_events,
            recomputed_tokens=sum(r.recomputed_tokens for r in reqs),
            mean_queue_s=float(queue.mean()),
            p50_queue_s=float(np.percentile(queue, 50)),
            p99_queue_s=float(np.percentile(queue, 99)),
            mean_ttft_s=float((first - arrival).mean()),
            mean_latency_s=float((finish - arrival).mean()),
            peak_tokens_used=t.peak_tokens_used,
            peak_usage=t.peak_in_use / pool,
            mean_usage=t.busy_in_use_sum / work_steps / pool if work_steps else 0.0,
        )

    def as_dict(self) -> dict[str, float | int]:
        """The metrics as a flat dict (JSON-able)."""
        return asdict(self)
