"""DecodeMemoryChecker alone, at chapter 5's first retraction (step 156 of the tiny example,
the normal loop): a step that fits decays the ratio; one that does not is skipped when it
may be (counted) or retracts request 2, logs SGLang's line and sets the ratio."""

from __future__ import annotations

import pytest

from pagedkv.lessons.examples import tiny_retraction_scheduler
from pagedkv.managers.scheduler import Scheduler


def before_decode(step: int) -> Scheduler:
    """The tiny example run up to ``step``, its finished requests dropped: the running
    batch as ``update_running_batch`` hands it to the checker."""
    s = tiny_retraction_scheduler(fast_forward=False)
    while s.num_steps < step:
        s.step()
    s.enqueue_arrivals()
    s.prepare_step()
    assert s.get_new_batch_prefill() is None
    s.running.filter_finished()
    return s


def test_a_step_that_fits_decays_the_ratio() -> None:
    s = before_decode(20)
    ratio, free = s.new_token_ratio, s.allocator.available_size()
    assert ratio > 0.098 + (0.7 - 0.098) / 60  # above the floor by more than a step
    assert s.decode_memory_checker.check_decode_mem(s.running, can_skip=True)
    assert s.new_token_ratio == pytest.approx(ratio - (0.7 - 0.098) / 60)
    assert s.allocator.available_size() == free and s.counters.num_decode_skips == 0


def test_a_step_that_does_not_fit_is_skipped_when_it_may_be() -> None:
    s = before_decode(156)
    ratio, events = s.new_token_ratio, len(s.trace.events)
    assert not s.decode_memory_checker.check_decode_mem(s.running, can_skip=True)
    assert s.counters.num_decode_skips == 1
    assert (s.new_token_ratio, len(s.trace.events), len(s.running)) == (ratio, events, 3)


def test_else_it_retracts_logs_and_sets_the_ratio() -> None:
    s = before_decode(156)
    old = s.new_token_ratio
    assert s.decode_memory_checker.check_decode_mem(s.running, can_skip=False)
    # request 2 goes (tests/lessons/test_analysis.py): its 92 tokens fill 6 pages of 16; the
    # 2 pages of its prefix (32 tokens) stay in the tree, so 4 pages, 64 slots, come free;
    # the ratio over the two that stay is capped at 1
    assert [r.rid for r in s.running.reqs] == [3, 4] and s.new_token_ratio == 1.0
    retract = s.trace.events[-1]
    assert (retract.step, retract.kind, retract.rid) == (156, "retract", 2)
    assert (retract.extra["freed"], retract.extra["kept"]) == (92, 32)
    assert s.trace.log[-1] == ("KV cache pool is full. Retract requests. #retracted_reqs: 1, "
                               f"#new_tokens_gained: 64, #new_token_ratio: {old:.4f} -> 1.0000")
    assert s.counters.num_decode_skips == 0 and s.waiting[0].rid == 2
