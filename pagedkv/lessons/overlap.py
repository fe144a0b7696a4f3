"""Chapter 5's look at the overlap loop: the visible example under SGLang's two loops.

:func:`overlap_comparison` runs :func:`~pagedkv.lessons.examples.tiny_retraction_scheduler`'s
five requests with the normal loop (``--disable-overlap-schedule``) and with the overlap loop
(SGLang's default, :meth:`pagedkv.managers.scheduler.Scheduler.event_loop_overlap`) and
reports what differs: when each request is seen finished, the retractions, the decode steps
skipped instead of a retraction, and how many slots are held at each step.
"""

from __future__ import annotations

from dataclasses import dataclass

from pagedkv.lessons.examples import tiny_retraction_scheduler


@dataclass(frozen=True)
class LoopRun:
    """One loop's run of the example.

    Attributes:
        loop: ``"normal"`` or ``"overlap"``.
        steps, decode_steps: steps in all, and decode steps.
        finish_steps: the step at which each request (by rid) was seen finished.
        retracted: rids retracted, in order; ``skips``: decode steps skipped instead.
        peak_used: most KV tokens the live requests held at the end of a step
            (``tokens_used`` of the trace's step rows).
    """

    loop: str
    steps: int
    decode_steps: int
    finish_steps: tuple[int, ...]
    retracted: tuple[int, ...]
    skips: int
    peak_used: int


def overlap_comparison() -> tuple[LoopRun, LoopRun]:
    """The example under the normal loop, then the overlap loop (both SGLang 0.5.23)."""
    out = []
    for loop, disable in (("normal", True), ("overlap", False)):
        s = tiny_retraction_scheduler(disable_overlap_schedule=disable)
        s.run()
        finish = {e.rid: e.step for e in s.trace.events if e.kind == "finish"}
        steps = s.trace.to_dict()["steps"]
        out.append(LoopRun(loop, s.num_steps, s.counters.num_decode_steps,
                           tuple(finish[r.rid] for r in s.reqs),
                           tuple(e.rid for e in s.trace.events if e.kind == "retract"),
                           s.counters.num_decode_skips, max(steps["tokens_used"])))
    return out[0], out[1]
