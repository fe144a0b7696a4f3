"""The overlap loop (SGLang's default ``event_loop_overlap``) on hand-checked cases; the
whole loop is compared with SGLang's own in ``tests/reference/test_event_loop.py``."""

from __future__ import annotations

import pytest

from pagedkv.entrypoints import simulate
from pagedkv.managers import Scheduler, SchedulerConfig
from pagedkv.workloads.synthetic import RequestSpec


def one_request(disable_overlap_schedule: bool) -> Scheduler:
    """A 4-token prompt that samples EOS as its 3rd token, on a 64-token pool."""
    cfg = SchedulerConfig(disable_overlap_schedule=disable_overlap_schedule)
    return Scheduler([RequestSpec(4, 3, 10)], max_total_num_tokens=64, config=cfg,
                     fast_forward=False)


def test_a_finished_request_is_seen_a_step_late_and_holds_its_next_slot() -> None:
    """Normal loop: prefill (token 1), decode (2), decode (3: EOS) -> finished at step 2,
    KV of 4 + 3 - 1 = 6 tokens cached. Overlap loop: the prefill's requests join the batch
    before token 1 is known and each decode allocates the next slot before the previous
    token is committed, so EOS is seen at step 3, by when the request holds the slot of a
    4th token: 7 tokens, all cached (their KV was written by that step)."""
    normal, overlap = one_request(True), one_request(False)
    normal.run()
    overlap.run()
    assert [e.step for e in normal.trace.events_of("finish")] == [2]
    assert [e.step for e in overlap.trace.events_of("finish")] == [3]
    assert normal.tree_cache.evictable_size() == 6
    assert overlap.tree_cache.evictable_size() == 7
    assert normal.counters.num_decode_steps == 2 and overlap.counters.num_decode_steps == 3


def test_the_slot_is_allocated_before_the_token_is_committed() -> None:
    s = one_request(False)
    s.step()  # the prefill is launched; its result is in flight
    s.step()  # merged, decode launched (slot 4 allocated), then the prefill's token committed
    assert s.running.kv_len.tolist() == [5] and s.running.generated.tolist() == [1]
    assert s.in_flight is not None and s.in_flight.batch.mode == "decode"
    assert s.allocator.available_size() == 64 - 5


def test_skip_instead_of_retraction_release_data() -> None:
    """0.5.23 skips a decode step where 0.5.9 retracts (``Release.skip_finishing_decode_in_flight``)."""
    from pagedkv.lessons.versions import DEMOS
    from pagedkv.releases import RELEASES

    run = DEMOS["skip_finishing_decode_in_flight"].run
    assert run(RELEASES["0.5.23"]) == "skips 1 decode step, retracts nothing"
    assert run(RELEASES["0.5.9"]) == "retracts request 1"


@pytest.mark.parametrize("disable_overlap_schedule", [True, False])
def test_simulate_takes_the_flag(disable_overlap_schedule: bool) -> None:
    """``simulate`` (what ``pagedkv simulate`` and the visualizer call) passes the flag to
    the scheduler."""
    specs = [RequestSpec(40, 30, 30, 0.0), RequestSpec(20, 50, 50, 0.0)]
    res = simulate(specs, max_total_tokens=2000, disable_overlap_schedule=disable_overlap_schedule)
    finish = [e.step for e in res.trace.events_of("finish")]
    # token k comes from step k - 1; the overlap loop commits it a step later
    assert finish == ([29, 49] if disable_overlap_schedule else [30, 50])
