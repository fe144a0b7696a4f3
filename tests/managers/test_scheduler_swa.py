"""The scheduler on a sliding-window hybrid's two pools (SGLang 0.5.23's ``is_hybrid_swa``):
random workloads keep every invariant after every step and leave both pools whole; directed
cases hold what the window changes. The step-by-step agreement with SGLang's own loop is
``tests/reference/test_event_loop_swa.py``."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from pagedkv.errors import ConfigError, PagedKVError
from pagedkv.managers import Scheduler, SchedulerConfig
from pagedkv.managers.scheduler_init import SlidingWindowPools
from pagedkv.mem_cache.allocator.swa import SWATokenToKVPoolAllocator
from pagedkv.mem_cache.swa_cache import SWAPrefixCache
from pagedkv.workloads.synthetic import RequestSpec


def _spec(prompt: int, out: int, max_new: int | None = None, arrival: float = 0.0,
          ids: tuple[int, ...] | None = None) -> RequestSpec:
    return RequestSpec(prompt_len=prompt, output_len=out, max_new_tokens=max_new or out,
                       arrival_s=arrival, input_ids=ids)


@st.composite
def scenarios(draw: st.DrawFn) -> tuple:
    page = draw(st.sampled_from([1, 4, 16]))
    window = draw(st.sampled_from([4, 8, 16, 32]))
    stem = tuple(draw(st.lists(st.integers(0, 3), min_size=0, max_size=40)))
    specs = []
    for _ in range(draw(st.integers(1, 8))):
        tail = tuple(draw(st.lists(st.integers(0, 50), min_size=1, max_size=40)))
        ids = (stem[:draw(st.integers(0, len(stem)))] + tail)[:80]
        max_new = draw(st.integers(1, 50))
        specs.append(_spec(len(ids), draw(st.integers(1, max_new)), max_new,
                           draw(st.sampled_from([0.0, 0.0, 0.05])), ids))
    longest = max(s.prompt_len + s.max_new_tokens for s in specs)
    full = -(-(longest + 8 * page) // page) * page + draw(st.integers(0, 8)) * page
    swa = max(full // 2 // page * page, -(-(longest + 4 * page) // page) * page)
    cfg = SchedulerConfig(
        chunked_prefill_size=draw(st.sampled_from([None, 16, 64])),
        schedule_conservativeness=draw(st.sampled_from([0.1, 0.3, 1.0])),
        swa_eviction_interval=draw(st.sampled_from([1, 4, 128])),
        disable_overlap_schedule=draw(st.booleans()))
    return specs, page, full, SlidingWindowPools(window, swa), cfg, draw(st.booleans())


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_random_workloads_keep_invariants_and_free_both_pools(case: tuple) -> None:
    specs, page, full, swa, cfg, radix = case
    s = Scheduler(specs, max_total_num_tokens=full, page_size=page, config=cfg,
                  radix_cache=radix, swa=swa)
    steps = 0
    try:
        while s.step():
            s.check_invariants()
            steps += 1
            assert steps < 20_000, "no progress"
    except PagedKVError as e:  # admission that never takes a waiting request, as SGLang's
        assume("stuck" not in str(e))
        raise
    assert all(r.finished and r.req_pool_idx == -1 and r.swa_lock is None for r in s.reqs)
    s.check_memory()  # both pools: free or in the tree, nothing locked
    alloc = s.allocator
    assert isinstance(alloc, SWATokenToKVPoolAllocator) and isinstance(s.tree_cache, SWAPrefixCache)
    assert s.tree_cache.protected_size() == s.tree_cache.swa_protected_size() == 0
    if not radix:
        assert alloc.full_available_size() == full
        assert alloc.swa_available_size() == swa.max_total_num_tokens_swa


def test_the_window_lets_a_request_longer_than_the_swa_pool_decode() -> None:
    """A 20-token prompt decoding 100 tokens on a 32-slot SWA pool (window 8, released every
    decode step): without the release it would need 120 SWA slots."""
    cfg = SchedulerConfig(swa_eviction_interval=1, chunked_prefill_size=None)
    s = Scheduler([_spec(20, 100)], max_total_num_tokens=256, page_size=1, config=cfg,
                  swa=SlidingWindowPools(8, 32))
    free = []
    while s.step():
        free.append(s.allocator.swa_available_size())
    assert s.reqs[0].generated == 100 and not s.trace.events_of("retract")
    # the prefill holds all 20; its checkpoint releases the 11 below 19 - 8 (the tree keeps
    # 9, locked); each decode step then holds the newest token and its window of 8 plus the
    # one being released next step: 9 + 10 in use at most, 13 free
    assert free[0] == 12 and free[1] == 22 and min(free[1:]) == 13


def test_without_release_the_same_request_is_retracted_to_an_abort() -> None:
    """The default interval (128) releases nothing in 100 steps: the SWA pool runs out and the
    last request is aborted, as SGLang 0.5.23 does."""
    cfg = SchedulerConfig(chunked_prefill_size=None)
    s = Scheduler([_spec(20, 100)], max_total_num_tokens=256, page_size=1, config=cfg,
                  swa=SlidingWindowPools(8, 32))
    s.run()
    assert s.reqs[0].finish_reason == "abort" and s.reqs[0].generated < 100


def test_hybrid_scheduler_follows_0_5_23_only() -> None:
    with pytest.raises(ConfigError, match="sglang_version"):
        Scheduler([_spec(4, 4)], max_total_num_tokens=64, config=SchedulerConfig(sglang_version="0.5.9"),
                  swa=SlidingWindowPools(8, 32))


@pytest.mark.parametrize(("window", "swa_tokens"), [(0, 32), (8, 0)])
def test_bad_window_or_swa_pool_is_refused(window: int, swa_tokens: int) -> None:
    with pytest.raises(ConfigError):
        Scheduler([_spec(4, 4)], max_total_num_tokens=64, swa=SlidingWindowPools(window, swa_tokens))


def test_swa_eviction_interval_from_the_environment() -> None:
    assert SchedulerConfig.from_env({"SGLANG_SWA_EVICTION_INTERVAL": "4"}).swa_eviction_interval == 4
    with pytest.raises(ConfigError, match="swa_eviction_interval"):
        SchedulerConfig(swa_eviction_interval=0)
