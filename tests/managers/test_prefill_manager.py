"""PrefillManager alone: a pass admits the queue in FCFS order until one request does not fit
(and then marks the batch full), a long prompt is carried from chunk to chunk, a full batch
admits nobody, and the pass's log line counts what it admitted."""

from __future__ import annotations

from pagedkv.managers.config import SchedulerConfig
from pagedkv.managers.scheduler import Scheduler
from pagedkv.workloads.synthetic import RequestSpec


def waiting(specs: list[RequestSpec], total: int, **cfg: object) -> Scheduler:
    """A scheduler (the normal loop, pages of 1) whose requests have arrived, nothing run."""
    s = Scheduler(specs, max_total_num_tokens=total,
                  config=SchedulerConfig(disable_overlap_schedule=True, **cfg))
    s.enqueue_arrivals()
    return s


def test_a_pass_admits_in_order_until_one_does_not_fit() -> None:
    # each costs 30 prompt + 5 reserved + 1 page (0.5.23) = 36 of 80 slots: two fit, the
    # third finds 8 left and stops the pass for memory
    s = waiting([RequestSpec(30, 5, 5)] * 3, 80)
    p = s.prefill_manager.get_new_batch_prefill(s.running, 0, 0.0)
    assert p is not None and [r.rid for r in p.batch.reqs] == [0, 1]
    assert p.batch.extend_lens.tolist() == [30, 30] and p.running_bs == 0
    assert s.running.batch_is_full and [r.rid for r in s.waiting] == [2]
    assert s.prefill_manager.chunked_req is None
    # the batch is full: the next pass admits nobody and leaves the queue alone
    assert s.prefill_manager.get_new_batch_prefill(s.running, 1, 0.0) is None
    assert [r.rid for r in s.waiting] == [2]


def test_a_long_prompt_is_carried_chunk_by_chunk() -> None:
    s = waiting([RequestSpec(40, 2, 2)], 256, chunked_prefill_size=16)
    pm = s.prefill_manager
    first = pm.get_new_batch_prefill(s.running, 0, 0.0)
    assert first is not None and pm.chunked_req is s.reqs[0] and s.chunked_req is s.reqs[0]
    assert first.batch.extend_lens.tolist() == [16] and not first.batch.sample.any()
    pm.stash_chunked_request()  # the 16 tokens go into the tree before the next pass
    second = pm.get_new_batch_prefill(s.running, 1, 0.0)
    assert second is not None and second.batch.prefix_lens.tolist() == [16]
    assert second.batch.extend_lens.tolist() == [16] and pm.chunked_req is s.reqs[0]
    pm.stash_chunked_request()
    last = pm.get_new_batch_prefill(s.running, 2, 0.0)
    assert last is not None and last.batch.extend_lens.tolist() == [8]
    assert pm.chunked_req is None and last.batch.sample.tolist() == [True]


def test_the_prefill_line_counts_the_pass() -> None:
    s = waiting([RequestSpec(30, 5, 5)] * 2, 256)
    p = s.prefill_manager.get_new_batch_prefill(s.running, 0, 0.0)
    assert p is not None
    s.prefill_manager.log_prefill(p, 0, 0.5)
    line = s.trace.log[-1]
    assert line.startswith("Prefill batch, #new-seq: 2, #new-token: 60, #cached-token: 0")
    assert "#running-req: 0, #queue-req: 0" in line and "input throughput (token/s): 120.00" in line
