"""The scheduler on a linear-attention hybrid: a request holds one state slot from admission to
finish, retraction frees it, admission stops when no slot is left; 0.5.9's radix cache is
refused (0.5.23's: tests/managers/test_mamba_radix_scheduling.py).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pagedkv.configs.mamba_utils import Mamba2CacheParams, Mamba2StateShape
from pagedkv.errors import ConfigError
from pagedkv.managers import Scheduler, SchedulerConfig
from pagedkv.mem_cache.mamba_pool import HybridReqToTokenPool, MambaPool
from pagedkv.workloads.synthetic import RequestSpec

STATE = Mamba2CacheParams(Mamba2StateShape.create(
    tp_world_size=1, intermediate_size=8, n_groups=2, num_heads=2, head_dim=4, state_size=4,
    conv_kernel=4), (0, 1))


def sched(specs: list[RequestSpec], slots: int, **kw: object) -> Scheduler:
    cfg = {"chunked_prefill_size": 16, **kw.pop("config", {})}  # type: ignore[dict-item]
    return Scheduler(specs, max_total_num_tokens=kw.pop("tokens", 256), page_size=4,  # type: ignore[arg-type]
                     radix_cache=False, config=SchedulerConfig(**cfg),
                     mamba_pool=MambaPool(slots, STATE), **kw)  # type: ignore[arg-type]


def slots_in_use(s: Scheduler) -> int:
    pool = s.req_to_token_pool
    assert isinstance(pool, HybridReqToTokenPool)
    return pool.mamba_pool.size - pool.mamba_allocator.available_size()


@pytest.mark.parametrize("disable_overlap_schedule", [True, False])
def test_a_request_holds_its_slot_from_admission_to_finish(disable_overlap_schedule: bool):
    specs = [RequestSpec(30, 20, 20, 0.0) for _ in range(5)]
    s = sched(specs, 3, config={"disable_overlap_schedule": disable_overlap_schedule})
    seen: dict[int, int] = {}
    peak = 0
    while s.step():
        s.check_invariants()
        for r in s.reqs:
            assert (r.mamba_pool_idx >= 0) == (r.req_pool_idx >= 0)
            if r.mamba_pool_idx >= 0:  # one slot for its whole life
                assert seen.setdefault(r.rid, r.mamba_pool_idx) == r.mamba_pool_idx
        peak = max(peak, slots_in_use(s))
    assert peak == 3 and len(seen) == 5  # three slots: never more than three running
    assert all(r.finished and r.mamba_pool_idx == -1 for r in s.reqs)
    assert slots_in_use(s) == 0
    s.check_memory()


@pytest.mark.parametrize(("release", "third"), [("0.5.23", 1), ("0.5.9", 3)])
def test_slots_go_back_to_the_back_of_the_free_list(release: str, third: int):
    """Slots 1 and 2 for the first two; the third waits; the first to finish frees its slot
    to the back, behind slot 3 (free: [3, 1]). 0.5.9: the third request gets slot 3.
    0.5.23: its pass first takes one slot ahead per waiting request (slot 3) and puts it
    back at the end (free: [1, 3]), so the third request gets slot 1. SGLang 0.5.23's own
    loop gives {0: 1, 1: 2, 2: 1} on this case (``tests/reference/test_event_loop_mamba.py``,
    ``test_slots_taken_ahead_by_each_pass``)."""
    specs = [RequestSpec(8, 2, 2, 0.0), RequestSpec(8, 40, 40, 0.0), RequestSpec(8, 2, 2, 0.0)]
    s = sched(specs, 3, config={"max_running_requests": 2, "disable_overlap_schedule": True,
                                "sglang_version": release})
    got: dict[int, int] = {}
    while s.step():
        for r in s.reqs:
            if r.mamba_pool_idx >= 0:
                got.setdefault(r.rid, r.mamba_pool_idx)
    assert got == {0: 1, 1: 2, 2: third}


@pytest.mark.parametrize(("release", "mamba"), [("0.5.23", True), ("0.5.9", False)])
def test_the_retraction_line_counts_the_slots_given_back(release: str, mamba: bool):
    """0.5.23's warning adds ``#mamba_num_gained`` (the slots the retraction freed) after
    ``#new_tokens_gained``; 0.5.9's counts KV tokens only."""
    specs = [RequestSpec(8, 50, 50, 0.0) for _ in range(6)]
    s = sched(specs, 6, tokens=128, config={"schedule_conservativeness": 0.1,
                                            "sglang_version": release})
    while s.step():
        pass
    lines = [line for line in s.trace.log if "Retract requests" in line]
    assert lines
    for line in lines:
        retracted = int(line.split("#retracted_reqs: ")[1].split(",")[0])
        assert ("#mamba_num_gained" in line) == mamba
        if mamba:  # one slot back per retracted request, between the two counts
            assert f", #mamba_num_gained: {retracted}, #new_token_ratio: " in line


def test_retraction_frees_the_slot():
    specs = [RequestSpec(8, 50, 50, 0.0) for _ in range(6)]
    s = sched(specs, 6, tokens=128, config={"schedule_conservativeness": 0.1})
    retracted = False
    while s.step():
        s.check_invariants()
        for r in s.reqs:
            if r.num_retractions and r.req_pool_idx < 0:
                assert r.mamba_pool_idx == -1
                retracted = True
    assert retracted and sum(r.num_retractions for r in s.reqs) > 0
    assert slots_in_use(s) == 0


def test_admission_stops_when_no_slot_is_left():
    """max_running_requests 5 over 2 state slots (SGLang caps it at the slots; a caller may
    not): never more than two requests hold rows, the others wait for a slot."""
    specs = [RequestSpec(12, 10, 10, 0.0) for _ in range(5)]
    s = sched(specs, 2, config={"max_running_requests": 5})
    peak = 0
    while s.step():
        s.check_invariants()
        peak = max(peak, sum(r.req_pool_idx >= 0 for r in s.reqs))
    assert peak == 2 and all(r.finished for r in s.reqs)


@pytest.mark.parametrize("release", ["0.5.23", "0.5.9"])
def test_a_chunked_request_continues_on_the_only_slot(release: str):
    """A 17-token prompt in chunks of 16 holds the only slot between its chunks: its next
    chunk needs no new slot (a regression: 0.5.9 stopped the pass, and the run, there)."""
    s = sched([RequestSpec(17, 1, 1, 0.0)], 1, config={"sglang_version": release,
                                                       "disable_overlap_schedule": True})
    while s.step():
        s.check_invariants()
    assert s.reqs[0].finished
    s.check_memory()


def test_the_radix_cache_is_refused_by_name_for_0509():
    """0.5.9's mamba radix cache (no_buffer, its own tree) is not modelled: refused by name."""
    with pytest.raises(ConfigError, match=r"sglang_version='0\.5\.9' is invalid; valid: 0\.5\.23 "
                                          r"for a linear-attention hybrid with the radix cache"):
        Scheduler([RequestSpec(8, 2, 2, 0.0)], max_total_num_tokens=64,
                  config=SchedulerConfig(sglang_version="0.5.9"), mamba_pool=MambaPool(2, STATE))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(1, 40), st.integers(1, 30), st.floats(0, 0.2)),
                min_size=1, max_size=8),
       st.integers(1, 5), st.sampled_from(["0.5.23", "0.5.9"]), st.booleans())
def test_random_runs_hold_one_slot_per_live_request(reqs, slots, release, overlap):
    specs = [RequestSpec(p, o, o, t) for p, o, t in reqs]
    s = sched(specs, slots, tokens=128, config={"sglang_version": release,
                                                "disable_overlap_schedule": not overlap,
                                                "schedule_conservativeness": 0.3})
    while s.step():
        s.check_invariants()  # one slot per row holder, none held by anyone else
        assert slots_in_use(s) <= slots
    assert all(r.finished for r in s.reqs) and slots_in_use(s) == 0
