"""What a run of :class:`pagedkv.entrypoints.engine.Engine` returns (:class:`EngineResult`,
simulated and real runs alike) and what it tells the user beyond the tokens: caps it lowered,
and wall-clock latencies per request.

Clamps. SGLang lowers a request's ``max_new_tokens`` at arrival to what the context and the
pool leave after its prompt, without a word to the client (``Scheduler.init_req_max_new_tokens``
in ``python/sglang/srt/managers/scheduler.py``: 0.5.9 ``min(max_new_tokens, max_req_len -
len(origin_input_ids) - 1)``; 0.5.23 also ``token_to_kv_pool_allocator.max_new_tokens_for_memory``,
the pool's room). pagedkv's scheduler clamps the same way
(:func:`~pagedkv.managers.scheduler_components.request_validator.validate_requests`); the
engine compares what each request asked with what it was granted and reports every
difference (:class:`Clamp`), so an output cut to a few tokens is never a surprise.

Timings. The trace's clock counts forward passes only; :class:`WallClock` reads the host
clock after every scheduler step, so TTFT and TPOT include the scheduler's own work, as a
client would measure them (``bench_serving``'s definitions: TTFT from sending to the first
token, TPOT ``(e2e - TTFT) / (output_len - 1)``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pagedkv.managers.config import SchedulerConfig
from pagedkv.managers.req import Req, RequestLike
from pagedkv.managers.trace import Trace
from pagedkv.managers.trace_summary import SummaryTrace
from pagedkv.metrics.metrics import Metrics
from pagedkv.sizing import KVPoolPlan, max_req_input_len


@dataclass(frozen=True)
class Clamp:
    """A request whose ``max_new_tokens`` the scheduler lowered at arrival.

    Attributes:
        rid: the request. asked, granted: ``max_new_tokens`` before and after (tokens).
        why: which bound and its numbers, in words.
    """

    rid: int
    asked: int
    granted: int
    why: str

    def message(self) -> str:
        """One line for stderr or a log."""
        return (f"request {self.rid}: max_new_tokens={self.asked} lowered to {self.granted} "
                f"({self.why}; SGLang clamps the same way at arrival)")

    def to_dict(self) -> dict[str, object]:
        """The JSON form."""
        return {"rid": self.rid, "asked": self.asked, "granted": self.granted, "why": self.why}


def lowered_caps(requests: Sequence[RequestLike], reqs: Sequence[Req],
                 max_total_num_tokens: int, page_size: int,
                 context_len: int | None) -> list[Clamp]:
    """Every request whose cap the scheduler lowered, with the bound that did it.

    Args:
        requests: what was submitted (``max_new_tokens`` as asked).
        reqs: the scheduler's requests after arrival (``max_new_tokens`` as granted).
        max_total_num_tokens, page_size, context_len: the pool and the model's context.
    """
    return [Clamp(req.rid, int(spec.max_new_tokens), int(req.max_new_tokens),
                  _clamp_why(req, max_total_num_tokens, page_size, context_len))
            for spec, req in zip(requests, reqs, strict=True)
            if req.max_new_tokens < spec.max_new_tokens]


def _clamp_why(req: Req, total: int, page_size: int, context_len: int | None) -> str:
    """Which bound lowered ``req``'s ``max_new_tokens`` at arrival, with its numbers."""
    max_req_len = max_req_input_len(total, context_len or total) + 5
    left = max_req_len - req.prompt_len - 1
    if req.max_new_tokens == left:
        bound = ("context_len" if context_len is not None and context_len <= total
                 else "max_total_num_tokens")
        return (f"max_req_len = min(context_len - 1, max_total_num_tokens - 1) = {max_req_len}"
                f" (set by {bound}) leaves {left} after the {req.prompt_len}-token prompt")
    return (f"the pool of max_total_num_tokens={total} in pages of {page_size} holds "
            f"the {req.prompt_len}-token prompt, one page for admission and one slot "
            f"for the allocator, and leaves room for {req.max_new_tokens}")


@dataclass(frozen=True)
class CutOutput:
    """A simulated request whose output the arrival clamp cut short: its ``max_new_tokens``
    lowered below the ``output_len`` it was to generate, so it finishes by length early.

    Attributes:
        rid: the request. output_len: the tokens it was to generate; granted: the
            ``max_new_tokens`` it got (tokens). why: the bound, in words.
    """

    rid: int
    output_len: int
    granted: int
    why: str

    def message(self, where: str = "") -> str:
        """One line; ``where``: the request's place in its file, e.g. ``" (line 3)"``."""
        return (f"request {self.rid}{where}: its {self.output_len}-token output cut to "
                f"{self.granted} tokens ({self.why}; SGLang lowers max_new_tokens the same way "
                "at arrival)")

    def to_dict(self) -> dict[str, object]:
        """The JSON form."""
        return {"rid": self.rid, "output_len": self.output_len, "granted": self.granted,
                "why": self.why}


def cut_outputs(reqs: Sequence[Req], max_total_num_tokens: int, page_size: int,
                context_len: int | None) -> list[CutOutput]:
    """Every simulated request (``output_len`` set) whose output the arrival clamp cut
    short (``max_new_tokens`` < ``output_len``), in rid order: its metrics count the
    tokens it was granted, not the ones the workload asked for, which a report must say.
    One pass over ``reqs`` (a million requests: ~0.1 s)."""
    return [CutOutput(r.rid, r.output_len, r.max_new_tokens,
                      _clamp_why(r, max_total_num_tokens, page_size, context_len))
            for r in reqs if r.output_len is not None and r.max_new_tokens < r.output_len]


@dataclass(frozen=True)
class RequestTiming:
    """Wall-clock latencies of one request, seconds from the start of the run (when every
    request of :meth:`Engine.generate` is sent).

    Attributes:
        ttft_s: to the first output token (None: it produced none).
        e2e_s: to its last token (None: it did not finish).
        output_len: tokens it produced.
    """

    ttft_s: float | None
    e2e_s: float | None
    output_len: int

    @property
    def tpot_s(self) -> float | None:
        """Mean time per output token after the first: ``(e2e - TTFT) / (output_len - 1)``
        (None with fewer than two tokens)."""
        if self.ttft_s is None or self.e2e_s is None or self.output_len < 2:
            return None
        return (self.e2e_s - self.ttft_s) / (self.output_len - 1)

    def to_dict(self) -> dict[str, float | None]:
        """The JSON form (seconds)."""
        return {"ttft_s": self.ttft_s, "tpot_s": self.tpot_s, "e2e_s": self.e2e_s}


class WallClock:
    """Host-clock times of each request's first token and finish, read after every step.

    Call :meth:`observe` after each scheduler step; :meth:`timings` at the end.
    """

    def __init__(self, num_requests: int) -> None:
        self.start = time.perf_counter()
        self.first: list[float | None] = [None] * num_requests
        self.done: list[float | None] = [None] * num_requests

    def observe(self, reqs: Sequence[Req]) -> None:
        """Stamp the requests that got their first token or finished since the last call."""
        now = time.perf_counter() - self.start
        for r in reqs:
            if self.first[r.rid] is None and r.generated > 0:
                self.first[r.rid] = now
            if self.done[r.rid] is None and r.finished:
                self.done[r.rid] = now

    def timings(self, reqs: Sequence[Req]) -> list[RequestTiming]:
        """One :class:`RequestTiming` per request, in rid order."""
        return [RequestTiming(self.first[r.rid], self.done[r.rid], r.generated) for r in reqs]


@dataclass
class EngineResult:
    """A finished run, of a real model or the simulated executor.

    Attributes:
        trace: the step-by-step record (a :class:`SummaryTrace` of totals when the run was
            given one).
        metrics: summary numbers (times are the trace's: measured for a real model, modelled
            for the simulated executor), over the finished requests if the run was interrupted.
        requests: the requests in submission order, with their final state.
        config: the scheduler's constants.
        plan: the KV pool SGLang would build that the run used (None: a pool given by size).
        startup_log: SGLang's start-up lines for the pool.
        tokenizer: decodes :attr:`texts` (None: ids only).
        clamps: every request whose ``max_new_tokens`` the scheduler lowered at arrival,
            with the value asked, the value granted and why (:class:`Clamp`).
        timings: per request, wall-clock TTFT, TPOT and end-to-end seconds
            (:class:`RequestTiming`; empty for a run that did not measure them).
        interrupted: Ctrl-C stopped the run before every request finished.
        core: the loop that ran it: ``"reference"`` (the Python scheduler) or ``"compiled"``
            (:mod:`pagedkv.managers.compiled_core`, exact to it).
        core_note: why the compiled core asked for did not run it (None: nothing to say).
    """

    trace: Trace | SummaryTrace
    metrics: Metrics
    requests: list[Req]
    config: SchedulerConfig
    plan: KVPoolPlan | None = None
    startup_log: list[str] = field(default_factory=list)
    tokenizer: Any = None
    clamps: list[Clamp] = field(default_factory=list)
    timings: list[RequestTiming] = field(default_factory=list)
    interrupted: bool = False
    core: str = "reference"
    core_note: str | None = None

    @property
    def outputs(self) -> list[list[int]]:
        """Each request's generated token ids (empty for a simulated run)."""
        return [list(r.output_ids or []) for r in self.requests]

    @property
    def texts(self) -> list[str] | None:
        """The outputs decoded by the tokenizer, or None without one."""
        if self.tokenizer is None:
            return None
        return [self.tokenizer.decode(ids, skip_special_tokens=True) for ids in self.outputs]

    @property
    def log(self) -> list[str]:
        """The start-up lines, then the scheduler's SGLang-format log."""
        return [*self.startup_log, *self.trace.log]
