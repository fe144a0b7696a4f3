"""Random workloads, page sizes and policies: invariants after every step, nobody lost."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pagedkv.managers import Scheduler, SchedulerConfig
from pagedkv.workloads.synthetic import RequestSpec


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[RequestSpec], int, int, SchedulerConfig]:
    page = draw(st.sampled_from([1, 2, 4, 8, 16]))
    n = draw(st.integers(1, 12))
    specs = []
    for _ in range(n):
        max_new = draw(st.integers(1, 80))
        specs.append(RequestSpec(draw(st.integers(1, 60)), draw(st.integers(1, max_new)),
                                 max_new, draw(st.sampled_from([0.0, 0.0, 0.05, 0.3, 1.0]))))
    need = max(-(-(s.prompt_len + s.max_new_tokens) // page) * page for s in specs) + page
    pool = draw(st.integers(need // page, max(need // page, 400 // page))) * page
    chunk = draw(st.sampled_from([None, page, 2 * page, 5 * page, 64]))
    cfg = SchedulerConfig(
        policy=draw(st.sampled_from(["sglang", "reserve_all", "no_reserve"])),
        schedule_conservativeness=draw(st.sampled_from([0.1, 0.3, 1.0, 1.5])),
        chunked_prefill_size=None if chunk is None else max(chunk, page),
        max_prefill_tokens=draw(st.sampled_from([16, 64, 16384])),
        max_running_requests=draw(st.sampled_from([None, 1, 3])),
        new_token_ratio_decay_steps=draw(st.sampled_from([5, 600])),
    )
    return specs, pool, page, cfg


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_random_workloads_keep_invariants(case: tuple) -> None:
    specs, pool, page, cfg = case
    s = Scheduler(specs, max_total_num_tokens=pool, page_size=page, config=cfg,
                  record_page_tables=True)
    steps = 0
    while s.step():
        s.check_invariants()
        steps += 1
        assert steps < 20_000, "no progress"
        assert s.trace.steps["tokens_free"][-1] >= 0
        assert s.trace.steps["tokens_used"][-1] <= pool
    # every request finished with exactly its output length
    assert [r.generated for r in s.reqs] == [spec.output_len for spec in specs]
    assert all(r.finish_s is not None and r.kv_len == 0 for r in s.reqs)
    assert s.allocator.available_size() == pool
    if cfg.policy.value == "reserve_all":
        assert not s.trace.events_of("retract")
    finishes = s.trace.events_of("finish")
    assert sorted(e[2] for e in finishes) == list(range(len(specs)))
    retracts = len(s.trace.events_of("retract"))
    assert retracts == len(s.trace.events_of("reprefill")) == sum(r.num_retractions
                                                                  for r in s.reqs)
    # page tables agree with the token counts
    for table, used in zip(s.trace.page_tables, s.trace.steps["tokens_used"], strict=True):
        assert sum(kv for _, kv, _ in table) == used
        assert all(len(pages) == -(-kv // page) for _, kv, pages in table)
        ids = [pid for _, _, pages in table for pid in pages]
        assert len(ids) == len(set(ids)) and 0 not in ids
    json.dumps(s.trace.to_dict())


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_fast_forward_gives_the_same_trace(case: tuple) -> None:
    specs, pool, page, cfg = case
    runs = []
    for fast in (False, True):
        s = Scheduler(specs, max_total_num_tokens=pool, page_size=page, config=cfg,
                      fast_forward=fast)
        while s.step():
            s.check_invariants()
        runs.append(s)
    slow, fast = runs
    assert fast.trace.to_dict() == slow.trace.to_dict()
    keys = ("generated", "first_admit_s", "first_token_s", "finish_s", "num_retractions",
            "recomputed_tokens", "queue_s")
    assert [[getattr(r, k) for k in keys] for r in fast.reqs] == [
        [getattr(r, k) for k in keys] for r in slow.reqs]
