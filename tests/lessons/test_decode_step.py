"""Chapter 5's worked decode step and request-life figure agree with the run they replay."""

from __future__ import annotations

import numpy as np
import pytest

from pagedkv.errors import ConfigError
from pagedkv.lessons.analysis import first_retraction
from pagedkv.lessons.decode_step import evicting_decode_steps, worked_decode_step
from pagedkv.lessons.examples import tiny_retraction_run
from pagedkv.lessons.request_life import request_life
from pagedkv.managers.schedule_batch import decode_need


@pytest.fixture(scope="module")
def first():
    return first_retraction(tiny_retraction_run())


def test_the_worked_step_is_the_run_s_first_retraction(first) -> None:
    w = worked_decode_step()
    before, checked, after, prepared = w.stages
    assert w.step == first.step and w.page_size == 16
    assert [r[0] for r in w.rows] == [r.rid for r in first.rows]
    assert [r[3] for r in w.rows] == [r.kv_len for r in first.rows]
    assert before.free == first.free and before.need == first.need == decode_need(
        [r[3] for r in w.rows], 16)
    assert checked.free < checked.need  # the check fails, so it retracts
    assert w.victims == (first.victim,) and w.order[-1] == first.victim
    assert after.free - checked.free == first.gained  # the log's #new_tokens_gained
    assert after.evictable - checked.evictable == first.kept
    assert after.free >= after.need
    assert w.ratio[1] == pytest.approx(first.ratio)
    assert prepared.need == 16 * (len(w.rows) - 1)  # a page per request that stays
    assert after.free - prepared.free == 16 * sum(1 for r in w.rows if r[4] and r[0] != first.victim)
    opens = sum(1 for r in w.rows if r[4] and r[0] != first.victim)
    assert prepared.note.endswith(f"opened {opens} page" + ("" if opens == 1 else "s"))


def test_a_decode_step_that_evicts_for_its_pages() -> None:
    """At pages of 16 the decode allocation asks the tree for a page per request, whatever
    the step opens: the run's first decode-step eviction comes from there, not from the check."""
    step = evicting_decode_steps()[0]
    w = worked_decode_step(step)
    before, checked, prepared = w.stages
    assert w.victims == () and checked.free == before.free  # the check needed nothing evicted
    assert before.free < prepared.need == 16 * len(w.rows) <= prepared.free
    assert prepared.evictable < before.evictable
    with pytest.raises(ConfigError, match="step"):
        worked_decode_step(10**6)


def test_the_victim_s_life(first) -> None:
    life = request_life(first.victim)
    kinds = [what for _, what in life.events]
    assert kinds == ["admitted, prefilled, prompt inserted into the tree", "retracted",
                     "re-prefilled", "finished"]
    step = dict((w, s) for s, w in life.events)["retracted"]
    assert life.cached[step] * 16 == first.kept  # its prompt, unlocked, stays in the tree
    assert life.own[step] == life.locked[step] == 0
    assert life.own[step - 1] + life.locked[step - 1] == -(-first.freed // 16)
    assert len(life.own) == len(tiny_retraction_run().trace.steps["step"])


def test_a_finished_request_is_cached_then_evicted() -> None:
    life = request_life(0)
    steps = dict((w, s) for s, w in life.events)
    done = steps["finished"]
    assert life.cached[done] > 0 and np.all(life.own[done:] == 0)
    assert "its last cached page evicted" in steps and life.cached[-1] == 0
    assert np.all(np.diff(life.cached[done:]) <= 0)  # nothing comes back once evicted


def test_a_request_that_is_not_in_the_run() -> None:
    with pytest.raises(ConfigError, match="rid"):
        request_life(99)
