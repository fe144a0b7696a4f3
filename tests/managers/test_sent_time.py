"""A later conversation turn is sent when the turn before it has answered: its queueing
delay and latencies count from then, not from its own (earlier) arrival time."""

from __future__ import annotations

import pytest

from pagedkv.managers import FixedStepTime, Scheduler, SchedulerConfig
from pagedkv.metrics import Metrics
from pagedkv.workloads.synthetic import RequestSpec


@pytest.mark.parametrize("disable_overlap_schedule", [True, False])
def test_later_turn_counts_from_when_it_was_sent(disable_overlap_schedule: bool) -> None:
    # turn 0: 10-token prompt, 3 tokens: prefill (t=0.01), decodes at 0.02, 0.03 -> done at 0.03
    # turn 1 (arrival 0, follows 0) is sent at 0.03 and admitted at once: no queueing.
    specs = [RequestSpec(10, 3, 3, 0.0), RequestSpec(20, 2, 2, 0.0, follows=0),
             RequestSpec(5, 1, 1, 0.5, follows=1)]
    # the same times in both loops: the overlap loop times turn 0's last token when its pass
    # ends (0.03), though it processes it a step later
    s = Scheduler(specs, max_total_num_tokens=256, step_time=FixedStepTime(0.01),
                  config=SchedulerConfig(disable_overlap_schedule=disable_overlap_schedule))
    s.run()
    first, second, third = s.reqs
    assert first.finish_s == pytest.approx(0.03)
    assert second.arrival_s == pytest.approx(0.03) and second.queue_s == pytest.approx(0.0)
    assert second.first_token_s - second.arrival_s == pytest.approx(0.01)
    assert third.arrival_s == 0.5  # its own arrival time is later than turn 1's finish
    m = Metrics.from_run(s.reqs, s.trace)
    assert m.mean_queue_s == pytest.approx(0.0)
    assert m.mean_ttft_s == pytest.approx(0.01)
