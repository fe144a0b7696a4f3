"""SchedulerStepRecorder alone: a StepRow's every field, read at the end of a step, and the
page tables; a summary trace never asks for the reservation."""

from __future__ import annotations

import pytest

from pagedkv.managers.config import SchedulerConfig
from pagedkv.managers.page_recorder import joining_requests
from pagedkv.managers.req import Req
from pagedkv.managers.schedule_batch import ScheduleBatch
from pagedkv.managers.scheduler import Scheduler
from pagedkv.managers.scheduler_components import (
    NewTokenRatioTracker,
    SchedulerStepRecorder,
    WaitingQueue,
)
from pagedkv.managers.trace import STEP_COLUMNS, StepRow, Trace, TraceMeta
from pagedkv.managers.trace_summary import SummaryTrace
from pagedkv.mem_cache.allocator import make_allocator
from pagedkv.mem_cache.memory_pool import ReqToTokenPool
from pagedkv.mem_cache.radix_cache import RadixCache
from pagedkv.workloads.synthetic import RequestSpec


def recorder(trace: Trace | SummaryTrace) -> tuple[SchedulerStepRecorder, ScheduleBatch]:
    alloc = make_allocator(64, 4)
    pool = ReqToTokenPool.for_release(4, 64, "0.5.23")
    tree = RadixCache.for_release(pool, alloc, "0.5.23")
    waiting = WaitingQueue.from_reqs([Req.from_spec(i, RequestSpec(5, 2, 4, 0.0)) for i in range(2)])
    waiting.recv_requests(0.0)
    rec = SchedulerStepRecorder(trace=trace, page_size=4, max_total_num_tokens=64,
                                token_to_kv_pool_allocator=alloc, req_to_token_pool=pool,
                                tree_cache=tree, waiting=waiting,
                                ratio_tracker=NewTokenRatioTracker.from_config(SchedulerConfig()))
    return rec, ScheduleBatch(pool, alloc, tree)


def test_step_row_fields_are_the_trace_columns() -> None:
    assert StepRow._fields == STEP_COLUMNS and len(STEP_COLUMNS) == 12


def test_a_row_read_from_the_pools() -> None:
    trace = Trace(TraceMeta(64, 4))
    rec, running = recorder(trace)
    rec.token_to_kv_pool_allocator.alloc(8)  # two pages out: 56 free, 2 pages used
    rec.record(5, 1.25, "idle", running, None, lambda: 3.5)
    rec.record_row(6, 1.5, "decode", used=7, reserved=2.0, free=52, num_running=1)
    rows = [StepRow(*col) for col in zip(*trace.steps.values(), strict=True)]
    assert rows == [StepRow(5, 1.25, "idle", 0, 3.5, 56, 2, 0, 2, 0.7, 0, 0),
                    StepRow(6, 1.5, "decode", 7, 2.0, 52, 3, 1, 2, 0.7, 0, 0)]
    assert trace.page_tables is None


def test_a_summary_trace_is_not_asked_for_the_reservation() -> None:
    def reserved() -> float:
        raise AssertionError("tokens_reserved read for a summary trace")

    summary = SummaryTrace(TraceMeta(64, 4))
    rec, running = recorder(summary)
    rec.record(0, 0.0, "idle", running, None, reserved)
    assert summary.totals().num_idle_steps == 1


@pytest.mark.parametrize("disable_overlap_schedule", [True, False])
def test_page_tables_of_a_chunked_prefill(disable_overlap_schedule: bool) -> None:
    # page 4, chunks of 8: a 12-token prompt is prefilled as 8 + 4. In the overlap loop the
    # request joins the running batch only at the third step, but holds its KV from the
    # second: its row and its tokens are counted then, as in the normal loop
    s = Scheduler([RequestSpec(12, 2, 2)], max_total_num_tokens=64, page_size=4,
                  config=SchedulerConfig(chunked_prefill_size=8,
                                         disable_overlap_schedule=disable_overlap_schedule),
                  record_page_tables=True)
    s.step()
    assert s.chunked_req is not None
    s.step()
    first, second = s.trace.page_tables
    assert [(rid, kv, len(pages)) for rid, kv, pages in first] == [(0, 8, 2)]
    assert [(rid, kv, len(pages)) for rid, kv, pages in second] == [(0, 12, 3)]
    assert second[0][2][:2] == first[0][2] and 0 not in second[0][2]  # page 0 pads
    assert second == s.step_recorder.page_tables(s.running, s.chunked_req, joining_requests(s))
    assert len(s.running) == (1 if disable_overlap_schedule else 0)
    assert s.trace.steps["tokens_used"] == [8, 12]
    with pytest.raises(TypeError):
        s.step_recorder.record_row(0, 0.0, "idle")  # every number is explicit
