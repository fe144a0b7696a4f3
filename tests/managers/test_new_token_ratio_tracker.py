"""NewTokenRatioTracker alone: SGLang 0.5.23's ratio, its decay, reset and retraction value."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pagedkv.errors import ConfigError, PagedKVError
from pagedkv.managers.config import SchedulerConfig
from pagedkv.managers.scheduler import Scheduler
from pagedkv.managers.scheduler_components import NewTokenRatioTracker
from pagedkv.workloads.synthetic import RequestSpec


def test_from_config_is_sglangs_defaults() -> None:
    t = NewTokenRatioTracker.from_config(SchedulerConfig())
    # 0.7, 0.7 * 0.14 = 0.098, (0.7 - 0.098) / 600 per step
    assert (t.init, t.current) == (0.7, 0.7)
    assert t.min == pytest.approx(0.098) and t.decay == pytest.approx(0.602 / 600)
    capped = NewTokenRatioTracker.from_config(SchedulerConfig(schedule_conservativeness=2.0))
    assert capped.init == 1.0 and capped.min == pytest.approx(0.14)  # 1.4 capped at 1


def test_decay_reaches_the_floor_and_stays_there() -> None:
    t = NewTokenRatioTracker(init=0.7, min=0.1, decay=0.25, current=0.7)
    t.decay_step()
    assert t.current == pytest.approx(0.45)
    t.decay_step()
    assert t.current == pytest.approx(0.2)
    t.decay_step()  # 0.2 - 0.25 < 0.1: the floor
    assert t.current == 0.1
    t.decay_step()
    assert t.current == 0.1
    t.reset()
    assert t.current == 0.7


def test_a_retraction_sets_the_ratio_even_below_the_floor() -> None:
    t = NewTokenRatioTracker(init=0.7, min=0.1, decay=0.25, current=0.3)
    t.set_after_retract(0.05)
    assert t.current == 0.05
    t.check_invariants()
    t.decay_step()  # max(0.05 - 0.25, 0.1): back up to the floor
    assert t.current == 0.1


@pytest.mark.parametrize("ratio", [-0.1, 1.5, math.nan, "0.5"])
def test_a_bad_retraction_value_is_refused(ratio: object) -> None:
    t = NewTokenRatioTracker.from_config(SchedulerConfig())
    with pytest.raises(ConfigError, match=r"ratio=.* is invalid; valid: a number in \[0, 1\]"):
        t.set_after_retract(ratio)  # type: ignore[arg-type]


@pytest.mark.parametrize(("fields", "message"), [
    ({"init": math.nan}, r"init=nan is invalid"),
    ({"min": 0.8}, r"min=0.8 is invalid; valid: at most init=0.7"),
    ({"decay": -1.0}, r"decay=-1.0 is invalid"),
    ({"decay": math.inf}, r"decay=inf is invalid"),
    ({"current": 1.2}, r"current=1.2 is invalid"),
])
def test_bad_fields_are_refused(fields: dict[str, float], message: str) -> None:
    values = {"init": 0.7, "min": 0.1, "decay": 0.001, "current": 0.7, **fields}
    with pytest.raises(ConfigError, match=message):
        NewTokenRatioTracker(**values)


def test_check_invariants_catches_a_broken_ratio() -> None:
    t = NewTokenRatioTracker(init=0.7, min=0.1, decay=0.001, current=0.7)
    t.current = 1.5  # written around the methods
    with pytest.raises(PagedKVError, match=r"current=1\.5"):
        t.check_invariants()


@given(st.lists(st.one_of(st.just("decay"), st.just("reset"),
                          st.floats(0.0, 1.0, allow_nan=False)), max_size=60))
def test_any_sequence_keeps_the_ratio_in_range(ops: list[object]) -> None:
    t = NewTokenRatioTracker.from_config(SchedulerConfig())
    for op in ops:
        before = t.current
        if op == "decay":
            t.decay_step()
            assert t.current == max(before - t.decay, t.min)
        elif op == "reset":
            t.reset()
            assert t.current == t.init
        else:
            t.set_after_retract(op)  # type: ignore[arg-type]
        t.check_invariants()


def test_the_scheduler_reads_and_moves_the_tracker() -> None:
    s = Scheduler([RequestSpec(8, 30, 30)], max_total_num_tokens=256)
    assert s.new_token_ratio is s.ratio_tracker.current == 0.7
    s.run()
    # one prefill, then 29 decode steps each decaying by (0.7 - 0.098) / 600; nothing idles
    assert s.new_token_ratio == pytest.approx(0.7 - 29 * 0.602 / 600)
    s.new_token_ratio = 0.25  # the scheduler's name writes the tracker
    assert s.ratio_tracker.current == 0.25
