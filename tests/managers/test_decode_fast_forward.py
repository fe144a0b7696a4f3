"""DecodeFastForward alone: which windows it finds, what taking one adds up to, and that the
scheduler builds one only for an executor that predicts its step times. (That a window is
exactly the single steps it replaces is tests/managers/test_fast_forward.py.)"""

from __future__ import annotations

from dataclasses import replace

import pytest

from pagedkv.managers.config import SchedulerConfig
from pagedkv.managers.scheduler import Scheduler
from pagedkv.managers.scheduler_components import DecodeFastForward
from pagedkv.model_executor.forward_batch_info import ForwardBatch, ForwardResult
from pagedkv.model_executor.sim_executor import FixedStepTime
from pagedkv.workloads.synthetic import RequestSpec


def decoding(specs: list[RequestSpec], pool: int = 1024, **kw: object) -> Scheduler:
    """A scheduler at its first decode step (the memory check and ratio decay done)."""
    s = Scheduler(specs, max_total_num_tokens=pool, page_size=4, step_time=FixedStepTime(0.5),
                  config=SchedulerConfig(disable_overlap_schedule=True), **kw)
    s.step()  # the prefill pass (the normal loop: its result is in at once)
    s.enqueue_arrivals()
    s.prepare_step()
    assert s.get_new_batch_prefill() is None and s.update_running_batch()
    return s


def test_a_quiet_batch_runs_until_the_first_request_stops() -> None:
    s = decoding([RequestSpec(10, 30, 30), RequestSpec(10, 12, 12)])
    ff = s.fast_forward
    assert isinstance(ff, DecodeFastForward)
    # each has sampled 1 token at prefill: request 1 stops after 11 more steps
    assert ff.window_length(s.running, None, s.clock) == 11
    assert ff.window_length(s.running, s.reqs[0], s.clock) == 1  # a chunked request pending


def test_an_arrival_ends_the_window_before_its_step() -> None:
    # request 2 arrives at 3.2 s: steps (0.5 s each) start at 0.5, 1.0, ..., 3.0; the step
    # that ends at 3.5 would see it, so the window stops after the step starting at 2.5
    s = decoding([RequestSpec(10, 30, 30), RequestSpec(10, 30, 30), RequestSpec(5, 3, 3, 3.2)])
    assert s.clock == 0.5 and not s.running.batch_is_full
    assert s.fast_forward.window_length(s.running, None, s.clock) == 6


def test_running_a_window_adds_its_steps_up() -> None:
    s = decoding([RequestSpec(10, 30, 30), RequestSpec(10, 12, 12)])
    ff = s.fast_forward
    window = ff.plan(5, s.running, records_steps=True)
    assert (window.steps, window.size, window.kv_sum) == (5, 2, 20)
    # 10 tokens in KV each: a new page at the 3rd step (position 12) for both
    assert window.free == [1024 - 24 - x for x in (0, 0, 8, 8, 8)]
    rows = len(s.trace)
    c = replace(s.counters)
    ff.run(window, c)
    assert c == replace(s.counters, clock=0.5 + 5 * 0.5, num_steps=s.num_steps + 4,
                        num_decode_steps=s.counters.num_decode_steps + 5,
                        decoded=s.counters.decoded + 10)
    assert len(s.trace) == rows + 4 and ff.windows_taken == 1  # the caller records the last
    assert s.trace.steps["tokens_used"][-4:] == [22, 24, 26, 28]
    assert s.trace.steps["time_s"][-4:] == [1.0, 1.5, 2.0, 2.5]


class RealModel:
    """Runs its passes (samples nothing here): it does not predict its step times."""

    predicts_step_times = False
    eos_token_ids: tuple[int, ...] = ()

    def forward(self, batch: ForwardBatch) -> ForwardResult:
        return ForwardResult(0.5, None)


@pytest.mark.parametrize(("kw", "built"), [({}, True), ({"fast_forward": False}, False),
                                           ({"record_page_tables": True}, False),
                                           ({"executor": RealModel()}, False)])
def test_built_only_for_an_executor_that_predicts_its_step_times(kw: dict[str, object],
                                                                 built: bool) -> None:
    s = Scheduler([RequestSpec(10, 30, 30)], max_total_num_tokens=256, page_size=4, **kw)
    assert (s.fast_forward is not None) == built
    assert s.real_tokens == isinstance(kw.get("executor"), RealModel)
    s.run()
    assert s.reqs[0].generated == 30
