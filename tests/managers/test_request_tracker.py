"""SchedulerRequestTracker alone: admissions (the queue's front leaves, counted; admit,
reprefill and chunk events), retractions (back of the queue) and finishes (followers sent)."""

from __future__ import annotations

import pytest

from pagedkv.managers.req import Req
from pagedkv.managers.scheduler_components import SchedulerRequestTracker, WaitingQueue
from pagedkv.managers.trace import Event, Trace, TraceMeta
from pagedkv.workloads.synthetic import RequestSpec


def setup() -> tuple[SchedulerRequestTracker, list[Req]]:
    """Three 10-token requests waiting since 0.0; request 2 follows request 0."""
    reqs = [Req.from_spec(i, RequestSpec(10, 4, 4, follows=f))
            for i, f in enumerate([None, None, 0])]
    waiting = WaitingQueue.from_reqs(reqs)
    waiting.recv_requests(0.0)
    return SchedulerRequestTracker(trace=Trace(TraceMeta(64, 1)), waiting=waiting), reqs


def test_admission_takes_the_front_counts_the_wait_and_the_hit() -> None:
    t, (a, b, _) = setup()
    a.prefix_len, a.extend_len = 3, 7
    b.prefix_len, b.extend_len = 0, 5  # chunked: 5 of its 10 tokens this pass
    t.admit([a, b], b, step=4, clock=0.5)
    assert len(t.waiting) == 0 and t.waiting.tokens == 0
    assert (a.queue_s, a.first_admit_s, a.cached_tokens, a.admitted_before) == (0.5, 0.5, 3, True)
    assert t.trace.events == [Event(4, "admit", 0, {"extend": 7, "cached": 3}),
                              Event(4, "admit", 1, {"extend": 5, "cached": 0}),
                              Event(4, "chunk", 1, {"prefix": 0, "tokens": 5})]
    b.req_pool_idx, b.prefix_len = 0, 5  # its next chunk keeps its row: no admission
    t.admit([b], None, step=5, clock=0.6)
    assert t.trace.events[-1] == Event(5, "chunk", 1, {"prefix": 5, "tokens": 5})
    assert b.queue_s == 0.5


def test_a_retracted_request_waits_again_and_is_admitted_as_a_reprefill() -> None:
    t, (a, b, _) = setup()
    t.admit([a, b], None, step=0, clock=0.0)
    a.generated, a.kept_at_retract = 3, 8
    t.retract(a, step=7, clock=2.0)
    assert (a.num_retractions, a.is_retracted, a.enqueued_s) == (1, True, 2.0)
    assert [r.rid for r in t.waiting] == [0] and t.waiting.tokens == 13
    assert t.trace.events[-1] == Event(7, "retract", 0, {"output_len": 3, "freed": 12, "kept": 8})
    a.prefix_len = 8
    t.admit([a], None, step=9, clock=3.0)
    assert t.trace.events[-1].kind == "reprefill" and not a.is_retracted
    assert (a.queue_s, a.recomputed_tokens, a.cached_tokens) == (1.0, 13 - 1 - 8, 8)


def test_a_finish_is_counted_once_and_sends_its_followers() -> None:
    t, (a, b, c) = setup()
    t.admit([a, b], None, step=0, clock=0.0)
    a.generated, a.finish_reason = 4, "length"
    t.finish(a, step=3, clock=1.5)
    b.finish_reason = "abort"
    t.finish(b, step=3, clock=1.5)
    assert t.num_finished == 2 and a.finish_s == 1.5
    assert [e.kind for e in t.trace.events[-2:]] == ["finish", "abort"]
    assert t.waiting.next_arrival_s() == 1.5  # request 2 follows request 0
    t.waiting.recv_requests(1.5)
    assert [r.rid for r in t.waiting] == [c.rid]


def test_admitting_a_request_that_is_not_the_front_is_refused() -> None:
    t, (_, b, _) = setup()
    with pytest.raises(AssertionError, match="FCFS"):
        t.admit([b], None, step=0, clock=0.0)
