"""LoopCounters alone: a pass moves the clock and ends an idle streak, a decode launch counts
a step and its tokens, ``at`` sets the clock for a block only; and a whole run keeps them
consistent at every step."""

from __future__ import annotations

import math

import pytest

from pagedkv.errors import PagedKVError
from pagedkv.lessons.examples import tiny_retraction_scheduler
from pagedkv.managers.scheduler_components import LoopCounters


def test_a_pass_moves_the_clock_and_ends_the_idle_streak() -> None:
    c = LoopCounters(clock=1.5, idle_blocked=2)
    c.pass_ran(0.25)
    assert (c.clock, c.idle_blocked) == (1.75, 0)
    c.decode_launched(3)
    c.decode_launched(2)
    assert (c.num_decode_steps, c.decoded, c.num_steps) == (2, 5, 0)


def test_at_sets_the_clock_for_the_block_only() -> None:
    c = LoopCounters(clock=4.0)
    with c.at(3.5) as inside:
        assert inside is c and c.clock == 3.5
    assert c.clock == 4.0
    with pytest.raises(RuntimeError), c.at(1.0):
        raise RuntimeError("a result that fails")
    assert c.clock == 4.0


@pytest.mark.parametrize("broken", [{"num_steps": -1}, {"decoded": -3}, {"clock": math.nan},
                                    {"clock": -1.0}, {"num_decode_steps": 5, "num_steps": 3}])
def test_check_invariants_catches_a_broken_count(broken: dict[str, float]) -> None:
    LoopCounters(num_steps=3, num_decode_steps=4).check_invariants()  # one launched ahead
    with pytest.raises(PagedKVError, match="loop counters broken"):
        LoopCounters(**broken).check_invariants()  # type: ignore[arg-type]


@pytest.mark.parametrize(("normal", "decoded", "decode_steps"), [(True, 410, 183),
                                                                 (False, 411, 184)])
def test_a_run_keeps_its_counters_consistent(normal: bool, decoded: int,
                                             decode_steps: int) -> None:
    s = tiny_retraction_scheduler(fast_forward=False, disable_overlap_schedule=normal)
    clocks = []
    while s.step():
        s.counters.check_invariants()
        clocks.append(s.clock)
    c = s.counters
    assert clocks == sorted(clocks) and c.num_steps == len(s.trace) == len(clocks)
    # the 410 output tokens of the 5 requests; the overlap loop samples one more, for
    # request 2, which its retraction (one step later than in the normal loop) drops
    assert sum(r.generated for r in s.reqs) == 410
    assert (c.decoded, c.num_decode_steps) == (decoded, decode_steps)
    assert c.num_decode_steps == s.trace.steps["kind"].count("decode")
    assert (c.num_decode_skips, c.idle_blocked) == (0, 0)
