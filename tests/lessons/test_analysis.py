"""pagedkv.lessons (admission, analysis, examples): the numbers chapters 4 and 5 read, by hand."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from pagedkv.errors import ConfigError
from pagedkv.lessons.admission import (
    UniformBatch,
    admission_pass,
    admission_state,
    ratio_curve,
    ratio_sweep,
    same_requests,
)
from pagedkv.lessons.analysis import (
    completion,
    first_ratio_jump,
    first_retraction,
    freed_per_retraction,
    most_free_while_waiting,
    retract_ratio,
    retraction_episodes,
    retraction_steps,
)
from pagedkv.lessons.examples import (
    exact_budgets,
    long_answers_workload,
    observe,
    running_batch,
    tiny_retraction_run,
)
from pagedkv.managers import AddReqResult, Req, SchedulerConfig
from pagedkv.managers.trace import Event, StepRow, Trace, TraceMeta
from pagedkv.mem_cache.allocator import decode_need
from pagedkv.workloads.synthetic import RequestSpec

CFG = SchedulerConfig()


def test_uniform_batch_and_admission_state() -> None:
    b = UniformBatch(n=120, prompt_len=600, max_new_tokens=2048, generated=400)
    assert b.kv_len == 999 and b.tokens_used == 119_880
    st = admission_state(b, 200_000, CFG, 0.7)
    # min(2048 - 400, 4096) * 0.7 = 1153.6 per request, 120 of them
    assert st.available == 80_120
    assert st.per_request == pytest.approx(1153.6)
    assert st.reserved == pytest.approx(138_432.0)
    assert st.rem_total_tokens == pytest.approx(-58_312.0)
    with pytest.raises(ConfigError, match="pool_tokens"):
        admission_state(b, 100_000, CFG, 0.7)


def empty(free: int, page: int = 1) -> object:
    """A pool of ``free`` slots with nothing running."""
    return admission_state(UniformBatch(0, 1, 1, 1), free, CFG, 0.7, page)


def test_admission_pass_stops_at_the_first_refusal() -> None:
    refused, why = admission_pass(empty(1000), same_requests(3, prompt_len=500, max_new_tokens=600))
    assert why is AddReqResult.NO_TOKEN and refused.can_run_list == []
    # 10,000 free, nothing reserved: 3,000 + 2,000 + 1 (0.5.23's page) fits and is charged
    adder, why = admission_pass(empty(10_000), [Req(0, 3000, 2000, 2000)])
    assert why is AddReqResult.CONTINUE and adder.rem_total_tokens == 10_000 - 5001
    # at page size 64 the prompt is charged in whole pages: 47 * 64 = 3,008, plus a page
    adder, _ = admission_pass(empty(10_048, 64), [Req(0, 3000, 2000, 2000)])
    assert adder.rem_total_tokens == 10_048 - (3008 + 64 + 2000)
    # the state is not changed by asking: the same pass again gives the same answer
    state = empty(10_000)
    assert admission_pass(state, [Req(0, 3000, 2000, 2000)])[0].rem_total_tokens == 4999
    assert admission_pass(state, [Req(0, 3000, 2000, 2000)])[0].rem_total_tokens == 4999


def test_ratio_sweep_admits_more_as_the_ratio_falls() -> None:
    rows = ratio_sweep(UniformBatch(200, 600, 2048, 400), 300_000, CFG, (1.0, 0.098),
                       same_requests(60, 1000, 8192))
    assert rows[0].state.available == 100_200
    assert rows[0].state.reserved == pytest.approx(200 * 1648)
    assert (rows[0].admitted, rows[0].result) == (0, AddReqResult.NO_TOKEN)
    assert rows[1].admitted > 0


def test_ratio_curve() -> None:
    # 0.7 falls by (0.7 - 0.098) / 600 per step: 0.399 after 300, the floor from 600 on
    assert ratio_curve(CFG, np.array([0, 300, 600, 700])) == pytest.approx(
        [0.7, 0.399, 0.098, 0.098])


def test_decode_need_and_retract_ratio() -> None:
    assert decode_need([16, 17, 32, 5], 16) == 32
    assert decode_need([3, 4, 5], 1) == 3
    assert retract_ratio([40, 10, 300], [1000, 500, 2000]) == pytest.approx(410 / 3501)
    assert retract_ratio([90], [100]) == 1.0


def test_retract_ratio_matches_retract_decode() -> None:
    batch = running_batch((500, 200, 300, 800), (40, 10, 10, 300), (1000, 500, 400, 2000), free=2)
    assert batch.kv_len.tolist() == [539, 209, 309, 1099]
    retracted, ratio, _ = batch.retract_decode()
    assert [r.rid for r in retracted] == [2]  # 10 outputs, tied with 1, longer prompt
    assert ratio == pytest.approx(retract_ratio([300, 40, 10], [2000, 1000, 500]))


def _trace(kinds: list[str], ratios: list[float], free: list[int], waiting: list[int],
           retract_at: list[int]) -> Trace:
    tr = Trace(TraceMeta(max_total_num_tokens=100))
    for i, (k, r, f, w) in enumerate(zip(kinds, ratios, free, waiting, strict=True)):
        tr.record_step(StepRow(step=i, time_s=0.01 * i, kind=k, tokens_used=100 - f,
                               tokens_reserved=5.0 * i, tokens_free=f, pages_used=100 - f,
                               num_running=3, num_waiting=w, new_token_ratio=r,
                               tokens_evictable=0, tokens_protected=0))
    for step in retract_at:
        tr.record_event(Event(step, "retract", step, {"output_len": 7, "freed": 10 + step}))
    return tr


def test_retraction_episodes() -> None:
    ratios = [0.5, 0.098, 0.3, 0.3, 0.3, 0.3, 0.3, 0.5, 0.3, 0.3]
    tr = _trace(["decode"] * 10, ratios, [0] * 10, [0] * 10, [2, 3, 8])
    ep = retraction_episodes(tr, min_ratio=0.098, gap=3)
    assert ep.starts == [2, 8] and ep.count == 2
    assert ep.at_floor == 1  # step 1's ratio is the floor, step 7's is not
    assert ep.gaps.tolist() == [6]
    assert ep.gaps_within(5, 6) == 1 and ep.gaps_within(7, 9) == 0
    assert retraction_steps(tr) == [2, 3, 8]
    assert freed_per_retraction(tr) == [12, 13, 18]
    with pytest.raises(ConfigError, match="gap"):
        retraction_episodes(tr, 0.098, gap=0)


def test_most_free_while_waiting() -> None:
    tr = _trace(["prefill", "decode", "decode", "decode"], [0.7] * 4, [90, 50, 70, 80],
                [1, 2, 3, 0], [])
    snap = most_free_while_waiting(tr, pool=100)
    # step 0 is a prefill, step 3 has nobody waiting: step 2 with 70 free
    assert (snap.step, snap.free, snap.waiting, snap.reserved) == (2, 70, 3, 10.0)
    with pytest.raises(ConfigError):
        most_free_while_waiting(_trace(["decode"], [0.7], [5], [0], []), pool=100)


def test_first_ratio_jump() -> None:
    tr = Trace(TraceMeta(max_total_num_tokens=100))
    assert first_ratio_jump(tr) is None
    tr.add_log(3, "Decode batch. #running-req: 4")
    tr.add_log(5, "KV cache pool is full. Retract requests. #retracted_reqs: 1, "
                  "#new_token_ratio: 0.0980 -> 0.3512")
    assert first_ratio_jump(tr) == ("0.0980", "0.3512")


@pytest.mark.parametrize("radix", [True, False])
def test_first_retraction_of_the_tiny_run(radix: bool) -> None:
    first = first_retraction(tiny_retraction_run(radix_cache=radix))
    # requests 0 and 1 finished at step 100; 2, 3 and 4 ran since steps 101-102 and have 54
    # outputs each. Request 4's kv_len 80 = 5 pages: its next token needs a 16-token page
    assert (first.step, first.free, first.need, first.page_size) == (156, 0, 16, 16)
    assert [r.rid for r in first.rows] == [2, 3, 4]
    assert [r.new_page for r in first.rows] == [False, False, True]
    # all tied on outputs: the longest prompt goes (39 > 27 > 24); it held 39 + 54 - 1 = 92
    assert (first.victim, first.tied_with, first.output_len, first.freed) == (2, (3, 4), 54, 92)
    assert (first.decoded, first.budget) == (54 + 54, 70 + 70)
    assert first.ratio == 1.0  # (108 + 20 * 2) / 141 > 1
    # with the tree, its prompt's 2 whole pages (32 tokens) stay cached: 6 - 2 pages come
    # back and the re-prefill computes 92 + 1 - 32 tokens; without, all 6 pages and 93
    gained, extend = (64, 61) if radix else (96, 93)
    assert first.reprefill_extend == extend
    assert first.log == ("KV cache pool is full. Retract requests. #retracted_reqs: 1, "
                         f"#new_tokens_gained: {gained}, #new_token_ratio: 0.0980 -> 1.0000")


def test_first_retraction_needs_page_tables() -> None:
    from pagedkv.managers import Scheduler

    sched = Scheduler([RequestSpec(10, 5, 5)], max_total_num_tokens=64)
    sched.run()
    with pytest.raises(ConfigError):
        first_retraction(sched)


def test_completion() -> None:
    done = SimpleNamespace(num_retractions=1, generated=5, output_len=5, max_new_tokens=9)
    fresh = SimpleNamespace(num_retractions=0, generated=3, output_len=3, max_new_tokens=3)
    res = SimpleNamespace(requests=[done, fresh], metrics=SimpleNamespace(recomputed_tokens=42))
    c = completion(res)
    assert (c.retracted, c.requests, c.complete, c.recomputed_tokens) == (1, 2, True, 42)
    fresh.generated = 2
    assert not completion(res).complete


def test_examples_workloads() -> None:
    specs = exact_budgets([RequestSpec(10, 5, 100, 0.5)])
    assert specs == [RequestSpec(10, 5, 5, 0.5)]
    w = long_answers_workload(2.0, seed=0)
    assert len(w) == 120 and w == long_answers_workload(2.0, seed=0)
    assert all(s.max_new_tokens == s.output_len <= 10_540 for s in w)
    with pytest.raises(ConfigError, match="efficiency"):
        observe(2.0, 0, efficiency=0.0)
