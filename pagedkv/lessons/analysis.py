"""Reading a finished run: retraction episodes, snapshots, the first retraction explained.

The book's chapters 4 and 5 call these instead of looping over traces in the notebook. Every
function reads pagedkv state (a :class:`~pagedkv.managers.trace.Trace`, a
:class:`~pagedkv.entrypoints.engine_outcome.EngineResult`, a :class:`~pagedkv.managers.Scheduler`) and
returns plain numbers; tables and figures are built in ``pagedkv_widgets``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pagedkv.entrypoints.engine_outcome import EngineResult
from pagedkv.errors import bad_value
from pagedkv.managers.retract_decode import retract_ratio
from pagedkv.managers.scheduler import Scheduler
from pagedkv.managers.trace import Trace
from pagedkv.mem_cache.allocator import decode_need


def retraction_steps(trace: Trace) -> list[int]:
    """Steps at which ``retract_decode`` ran, sorted, each once."""
    return sorted({e.step for e in trace.events_of("retract")})


@dataclass(frozen=True)
class Episodes:
    """Retraction episodes of a run (see :func:`retraction_episodes`).

    ``starts``: step of each episode's first retraction; ``at_floor``: episodes that began
    with ``new_token_ratio`` at its floor; ``gaps``: decode steps between consecutive starts.
    """

    starts: list[int]
    at_floor: int
    gaps: np.ndarray

    @property
    def count(self) -> int:
        """Number of episodes."""
        return len(self.starts)

    def gaps_within(self, low: int, high: int) -> int:
        """Gaps with ``low <= gap <= high`` decode steps."""
        return int(((self.gaps >= low) & (self.gaps <= high)).sum())


#: Retractions fewer decode steps apart than this belong to one episode (chapter 4).
EPISODE_GAP_STEPS = 100


def retraction_episodes(trace: Trace, min_ratio: float, gap: int = EPISODE_GAP_STEPS) -> Episodes:
    """Group retractions less than ``gap`` decode steps apart into episodes.

    The ratio an episode "began at" is the ``new_token_ratio`` recorded at the step before
    its first retraction; it is at the floor when within 1e-9 of ``min_ratio``.
    """
    if gap < 1:
        raise bad_value("gap", gap, ">= 1 decode step")
    s = trace.steps
    decode_index = np.cumsum(np.asarray(s["kind"]) == "decode")
    starts: list[int] = []
    last = None
    for step in retraction_steps(trace):
        if last is None or decode_index[step] - decode_index[last] >= gap:
            starts.append(step)
        last = step
    at_floor = sum(abs(s["new_token_ratio"][st - 1] - min_ratio) < 1e-9 for st in starts)
    return Episodes(starts, int(at_floor), np.diff(decode_index[starts]))


@dataclass(frozen=True)
class StepSnapshot:
    """One step's memory and queue columns (tokens; ratio unitless). ``free`` counts what
    SGLang's ``token usage`` counts as unused: free slots plus evictable cached ones."""

    step: int
    free: int
    pool: int
    waiting: int
    running: int
    reserved: float
    ratio: float


def most_free_while_waiting(trace: Trace, pool: int) -> StepSnapshot:
    """The decode step with the most unused room (free + evictable slots) while requests
    waited in the queue.

    Raises ConfigError when no decode step had anyone waiting.
    """
    s = trace.steps
    free = np.asarray(s["tokens_free"]) + np.asarray(s["tokens_evictable"])
    waiting = (np.asarray(s["num_waiting"]) > 0) & (np.asarray(s["kind"]) == "decode")
    if not waiting.any():
        raise bad_value("trace", "no decode step with a waiting request",
                        "a run whose queue was ever non-empty during decode")
    i = int(np.argmax(np.where(waiting, free, -1)))
    return StepSnapshot(i, int(free[i]), pool, int(s["num_waiting"][i]), int(s["num_running"][i]),
                        float(s["tokens_reserved"][i]), float(s["new_token_ratio"][i]))


@dataclass(frozen=True)
class BatchRow:
    """One running request just before a decode step (tokens)."""

    rid: int
    prompt_len: int
    outputs: int
    kv_len: int
    pages: list[int]
    new_page: bool


@dataclass(frozen=True)
class FirstRetraction:
    """The first retraction of a run recorded with page tables, read back from its trace.

    ``rows``: the batch before the step; ``free`` / ``need``: slots free and needed by the
    step; ``victim``, its prompt, its ``output_len`` (kept), its ``freed`` KV tokens, the
    ``kept`` ones the radix cache holds on to (its cached prompt prefix) and the slots
    ``gained`` on the free list (the log's ``#new_tokens_gained``);
    ``tied_with`` / ``tied_prompts``: the surviving requests with as many outputs, in batch order,
    and their prompt lengths (empty if none);
    ``decoded`` / ``budget``: sums over the survivors that set ``ratio``
    (with ``retract_steps``, ``SGLANG_RETRACT_DECODE_STEPS``); ``log``: the SGLang
    log line; ``reprefill_step`` and ``reprefill_extend``: when the victim was prefilled
    again, over how many tokens.
    """

    step: int
    rows: list[BatchRow]
    free: int
    need: int
    page_size: int
    victim: int
    victim_prompt: int
    output_len: int
    freed: int
    kept: int
    gained: int
    tied_with: tuple[int, ...]
    tied_prompts: tuple[int, ...]
    decoded: int
    budget: int
    retract_steps: int
    ratio: float
    log: str
    reprefill_step: int
    reprefill_extend: int


def first_retraction(sched: Scheduler) -> FirstRetraction:
    """Explain the first ``retract_decode`` of a finished ``sched`` run.

    ``sched`` must have run with ``record_page_tables=True`` and retracted at least once;
    otherwise ConfigError.
    """
    trace, p = sched.trace, sched.trace.meta.page_size
    events = trace.events_of("retract")
    if trace.page_tables is None or not events:
        raise bad_value("sched", "no retraction or no page tables",
                        "a finished run with record_page_tables=True that retracted")
    step, victim, info = events[0].step, events[0].rid, events[0].extra
    log = trace.log[trace.log_steps.index(step)]
    rows = [BatchRow(rid, sched.reqs[rid].prompt_len, kv - sched.reqs[rid].prompt_len + 1, kv,
                     list(pages), kv % p == 0)
            for rid, kv, pages in trace.page_tables[step - 1]]
    stay = [r for r in rows if r.rid != victim]
    tied = [r.rid for r in stay if r.outputs == info["output_len"]]
    budget = [sched.reqs[r.rid].max_new_tokens for r in stay]
    re = next(e for e in trace.events_of("reprefill") if e.rid == victim)
    return FirstRetraction(
        step, rows, int(trace.steps["tokens_free"][step - 1]),
        decode_need([r.kv_len for r in rows], p), p, victim, sched.reqs[victim].prompt_len,
        info["output_len"], info["freed"], info["kept"],
        int(log.split("#new_tokens_gained: ")[1].split(",")[0]), tuple(tied),
        tuple(sched.reqs[t].prompt_len for t in tied), sum(r.outputs for r in stay),
        sum(budget), sched.config.retract_decode_steps,
        retract_ratio([r.outputs for r in stay], budget,
                      sched.config.retract_decode_steps),
        log, re.step, re.extra["extend"])


def first_ratio_jump(trace: Trace) -> tuple[str, str] | None:
    """``(before, after)`` of the first "KV cache pool is full" log line, as printed; None if
    the run never retracted."""
    for line in trace.log:
        if line.startswith("KV cache pool is full"):
            before, after = line.split("#new_token_ratio: ")[1].split(" -> ")
            return before, after
    return None


def freed_per_retraction(trace: Trace) -> list[int]:
    """KV tokens each retracted request held when it was retracted, in order."""
    return [int(e.extra["freed"]) for e in trace.events_of("retract")]


@dataclass(frozen=True)
class RetractionAccounting:
    """Where retraction's tokens went, per victim, over some runs (mean tokens).

    ``held``: KV tokens a victim held; ``kept``: those the radix cache keeps (its prompt's
    cached whole pages); ``own`` = ``held - kept``, freed at once; ``gained``: the log's
    ``#new_tokens_gained`` per victim, which also counts what the tree then evicted to leave
    ``SGLANG_RETRACT_DECODE_STEPS`` slots per remaining request (``evicted`` = ``gained -
    own``, pages rounding included); ``stay``: the fewest and most requests left running
    after a retraction (each asks the tree for 20 slots).
    """

    victims: int
    held: float
    kept: float
    gained: float
    stay: tuple[int, int] = (0, 0)  # fewest and most requests left running after a retraction

    @property
    def own(self) -> float:
        return self.held - self.kept

    @property
    def evicted(self) -> float:
        return self.gained - self.own


def retraction_accounting(traces: Sequence[Trace]) -> RetractionAccounting | None:
    """:class:`RetractionAccounting` over every retraction of ``traces``; None if none."""
    events = [e.extra for tr in traces for e in tr.events_of("retract")]
    if not events:
        return None
    gained = [int(line.split("#new_tokens_gained: ")[1].split(",")[0])
              for tr in traces for line in tr.log if line.startswith("KV cache pool is full")]
    n = len(events)
    stay = [tr.steps["num_running"][step - 1] - 1 for tr in traces
            for step in sorted({e.step for e in tr.events_of("retract")})]
    return RetractionAccounting(n, sum(e["freed"] for e in events) / n,
                                sum(e["kept"] for e in events) / n, sum(gained) / n,
                                (min(stay), max(stay)))


@dataclass(frozen=True)
class Completion:
    """Whether every request of a run finished with exactly its output length."""

    retracted: int
    requests: int
    complete: bool
    recomputed_tokens: int


def completion(result: EngineResult) -> Completion:
    """Count a run's retracted requests and check each produced exactly its output
    (``output_len``, or ``max_new_tokens`` where SGLang clamped that below it)."""
    reqs = result.requests
    return Completion(sum(1 for q in reqs if q.num_retractions), len(reqs),
                      all(q.generated == min(q.output_len, q.max_new_tokens) for q in reqs),
                      result.metrics.recomputed_tokens)
