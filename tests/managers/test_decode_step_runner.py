"""DecodeStepRunner alone: a decode step's slots and counts, the normal loop's step with and
without a fast-forward (the same step), a window taken only with one, and the decode line
only every ``decode_log_interval`` steps."""

from __future__ import annotations

from pagedkv.managers.config import SchedulerConfig
from pagedkv.managers.scheduler import Scheduler
from pagedkv.model_executor.sim_executor import FixedStepTime
from pagedkv.workloads.synthetic import RequestSpec

SPECS = [RequestSpec(10, 30, 30), RequestSpec(10, 12, 12)]


def decoding(**kw: object) -> Scheduler:
    """Two requests after their prefill pass (the normal loop, 0.5 s a step, pages of 4),
    their first decode step checked (``update_running_batch``) and not yet run."""
    config = SchedulerConfig(disable_overlap_schedule=True, decode_log_interval=3)
    s = Scheduler(SPECS, max_total_num_tokens=1024, page_size=4, step_time=FixedStepTime(0.5),
                  config=config, **kw)
    s.step()
    s.enqueue_arrivals()
    s.prepare_step()
    assert s.get_new_batch_prefill() is None and s.update_running_batch()
    return s


def test_prepare_decode_takes_a_slot_each_and_counts_the_step() -> None:
    s = decoding()
    free = s.allocator.available_size()
    batch = s.decode_step_runner.prepare_decode(s.running)
    # 10 tokens in KV each: the 11th opens no page (3 pages of 4 hold 12)
    assert batch.mode == "decode" and s.running.kv_len.tolist() == [11, 11]
    assert s.allocator.available_size() == free
    assert (s.counters.num_decode_steps, s.counters.decoded) == (1, 2 + 2)


def test_a_step_is_the_same_with_and_without_the_fast_forward() -> None:
    runs = []
    for ff in (True, False):
        s = decoding(fast_forward=ff)
        s.decode_step_runner.run_decode_step(s.running)
        runs.append((s.clock, s.counters.num_decode_steps, s.counters.decoded,
                     s.running.generated.tolist(), s.running.kv_len.tolist()))
    assert runs[0] == runs[1] == (1.0, 1, 4, [2, 2], [11, 11])


def test_a_window_only_with_a_fast_forward() -> None:
    s = decoding(fast_forward=False)
    assert not s.decode_step_runner.run_decode_window(s.running, None)
    s = decoding()
    # request 1 stops after 11 more steps (tests/managers/test_decode_fast_forward.py)
    assert s.decode_step_runner.run_decode_window(s.running, None)
    assert (s.counters.num_decode_steps, s.counters.decoded, s.clock) == (11, 2 + 22, 0.5 + 5.5)
    assert s.running.finished.tolist() == [False, True]  # its result processed at once


def test_the_decode_line_every_interval_steps() -> None:
    s = decoding(fast_forward=False)
    for _ in range(4):
        s.decode_step_runner.run_decode_step(s.running)
    lines = [line for line in s.trace.log if line.startswith("Decode batch")]
    assert len(lines) == 1 and "#running-req: 2" in lines[0]  # the 3rd decode step's
