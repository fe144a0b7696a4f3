"""The compiled step core against the Python scheduler (the reference): the same run, to the
last slot.

The fast-forward test's seeded workloads (page sizes 1 and 16, pools small enough to retract,
all at t=0 or Poisson, both SGLang releases, chunked prefill small enough to chunk, ignore-EOS
requests), radix cache off (on: ``test_compiled_core_radix.py``), in both loops: every
request's fields, the step count and counters, the summary trace's totals, every event and
log line handed on, and the allocator's final state (the free list in order, every slot's
state, every page-table row, the free request rows) must be equal. Then random small
workloads (hypothesis).
"""

from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedkv.errors import ConfigError, PagedKVError
from pagedkv.managers import Scheduler, SchedulerConfig
from pagedkv.managers.compiled_core import numba_available
from pagedkv.managers.trace import TraceMeta
from pagedkv.managers.trace_summary import SummaryTrace
from pagedkv.mem_cache.radix_cache import RadixCache
from pagedkv.model_executor.sim_executor import FixedStepTime, StepTime
from pagedkv.workloads.synthetic import RequestSpec

pytestmark = pytest.mark.skipif(not numba_available(), reason="numba is not installed")

# fast_forward's workloads and step times: the cases that are known to retract and chunk
from tests.managers.test_fast_forward import REQ_KEYS, STEP_TIME, workload  # noqa: E402

EXTRA_KEYS = ("prefix_len", "extend_len", "finished", "is_retracted", "max_new_tokens")


def run(specs: list[RequestSpec], pool: int, page: int, cfg: SchedulerConfig,
        compiled: bool, step_time: StepTime = STEP_TIME, listen: bool = True,
        radix: bool = False) -> tuple[Scheduler, list[object], list[str]]:
    """Run to the end on one path; the scheduler, its events and its log lines (none taken
    without ``listen``)."""
    from pagedkv.managers.compiled_core.runner import compiled_core_refusal, run_compiled

    events: list[object] = []
    logs: list[str] = []
    trace = (SummaryTrace(TraceMeta(pool, page), on_event=events.append, on_log=logs.append)
             if listen else SummaryTrace(TraceMeta(pool, page)))
    s = Scheduler(specs, max_total_num_tokens=pool, page_size=page, config=cfg,
                  radix_cache=radix, step_time=step_time, trace=trace)
    if compiled:
        assert compiled_core_refusal(s) is None
        run_compiled(s)
    else:
        s.run()
    return s, events, logs


def final_state(s: Scheduler) -> dict[str, object]:
    """What a run leaves behind: requests, counters, totals, the allocator and the rows."""
    a = s.allocator
    return {
        "reqs": [[getattr(r, k) for k in REQ_KEYS + EXTRA_KEYS] for r in s.reqs],
        "counters": (s.num_steps, s.counters.num_decode_steps, s.counters.decoded, s.clock,
                     s.new_token_ratio, s.counters.num_decode_skips, s.num_finished),
        "totals": s.trace.totals(),
        "free_pages": a.free_pages.tolist(),
        "slot_state": a.slot_state.numpy().tobytes(),
        "req_to_token": s.req_to_token_pool.req_to_token.numpy().tobytes(),
        "free_rows": list(s.req_to_token_pool.free_slots),
        "tree": tree_state(s.tree_cache),
    }


def tree_state(tree: object) -> object:
    """The radix tree's nodes (id, parent, key, slots, lock, access time, children in order),
    sizes, evicted slots and next id and tick, and its eviction order (None: the cache off)."""
    if not isinstance(tree, RadixCache):
        return None
    nodes = [(n.id, None if n.parent is None else n.parent.id, n.key.tolist(), n.value.tolist(),
              n.lock_ref, n.last_access_time, [c.id for c in n.children.values()])
             for n in tree.nodes()]
    lru = sorted({(t, i) for t, i, n in tree.lru_heap  # live entries (a node may be twice)
                  if n.parent is not None and not n.children and n.lock_ref == 0
                  and n.last_access_time == t})
    return (nodes, tree.evictable_size(), tree.protected_size(), tree.num_nodes,
            tree.evicted_tokens, next(copy.copy(tree._ids)), next(copy.copy(tree._clock)), lru)


def config(seed: int, page: int, version: str, overlap: bool) -> SchedulerConfig:
    chunk = (None, 2 * page, 4 * page, 64)[seed % 4]
    return SchedulerConfig(chunked_prefill_size=None if chunk is None else max(chunk, page),
                           max_prefill_tokens=(64, 16384)[seed % 2],
                           new_token_ratio_decay_steps=(20, 600)[seed % 3 == 0],
                           schedule_conservativeness=(0.3, 1.0)[seed % 2],
                           disable_overlap_schedule=not overlap, sglang_version=version,
                           decode_log_interval=(1, 40)[seed % 2])


def check_same(specs: list[RequestSpec], pool: int, page: int, cfg: SchedulerConfig,
               step_time: StepTime = STEP_TIME, listen: bool = True, radix: bool = False
               ) -> Scheduler:
    """Both paths on one workload; everything equal. Returns the reference's scheduler."""
    ref, ref_events, ref_logs = run(specs, pool, page, cfg, False, step_time, listen, radix)
    fast, events, logs = run(specs, pool, page, cfg, True, step_time, listen, radix)
    assert events == ref_events
    assert logs == ref_logs
    assert final_state(fast) == final_state(ref)
    return ref


CASES = [(seed, page, poisson, version, overlap)
         for seed in range(8) for page in (1, 16) for poisson in (False, True)
         for version in ("0.5.23", "0.5.9") for overlap in (True, False)]


@pytest.mark.parametrize(("seed", "page", "poisson", "version", "overlap"), CASES)
def test_compiled_core_matches_the_reference(seed: int, page: int, poisson: bool, version: str,
                                             overlap: bool) -> None:
    specs, pool = workload(seed, page, poisson)
    try:
        check_same(specs, pool, page, config(seed, page, version, overlap))
    except ConfigError:  # an ignore-EOS request this pool could never admit
        pytest.skip("workload refused up front")


@pytest.mark.parametrize(("seed", "page", "version"), [(1, 1, "0.5.23"), (2, 16, "0.5.9")])
def test_a_trace_that_takes_nothing_and_fixed_step_times(seed: int, page: int, version: str) -> None:
    """A summary trace with no listener (no events kept) and fixed step times: the same."""
    specs, pool = workload(seed, page, True)
    for step_time in (STEP_TIME, FixedStepTime(0.003)):
        check_same(specs, pool, page, config(seed, page, version, True), step_time, listen=False)


def test_the_cases_exercise_retraction_chunks_and_logs() -> None:
    """The comparison is worth something only if the cases retract, chunk, abort or idle
    and log: count them over the reference's runs of the 0.5.23 overlap cases."""
    retractions = chunks = idle = logs = 0
    for seed, page, poisson, version, overlap in CASES:
        if version != "0.5.23" or not overlap:
            continue
        specs, pool = workload(seed, page, poisson)
        try:
            s, _, lines = run(specs, pool, page, config(seed, page, version, overlap), compiled=False)
        except ConfigError:
            continue
        t = s.trace.totals()
        retractions += t.retraction_events
        chunks += t.chunk_events
        idle += t.num_idle_steps
        logs += len(lines)
    assert retractions > 10 and chunks > 100 and idle > 10 and logs > 1000


@st.composite
def small_runs(draw: st.DrawFn) -> tuple[list[RequestSpec], int, int, SchedulerConfig]:
    """A few requests on a pool that holds a few of them, with every knob the core takes."""
    page = draw(st.sampled_from((1, 2, 16)))
    n = draw(st.integers(1, 20))
    specs = []
    t = 0.0
    for _ in range(n):
        prompt = draw(st.integers(1, 80))
        out = draw(st.integers(1, 100))
        t += draw(st.sampled_from((0.0, 0.0, 0.001, 0.02, 0.5)))
        specs.append(RequestSpec(prompt, out, out + draw(st.integers(0, 10)), t,
                                 ignore_eos=draw(st.booleans())))
    biggest = max(s.prompt_len + s.max_new_tokens for s in specs)
    pool = -(-int(biggest * draw(st.floats(1.0, 2.0))) // page) * page + 2 * page
    chunk = draw(st.sampled_from((None, 1, 2, 4)))
    cfg = SchedulerConfig(
        chunked_prefill_size=None if chunk is None else chunk * page,
        max_prefill_tokens=draw(st.sampled_from((16, 64, 16384))),
        max_running_requests=draw(st.sampled_from((None, 1, 2, 3))),
        new_token_ratio_decay_steps=draw(st.sampled_from((5, 600))),
        schedule_conservativeness=draw(st.sampled_from((0.3, 1.0))),
        disable_overlap_schedule=draw(st.booleans()),
        disable_consecutive_prefill_overlap=draw(st.booleans()),
        decode_log_interval=draw(st.sampled_from((1, 3))),
        sglang_version=draw(st.sampled_from(("0.5.23", "0.5.9"))))
    return specs, pool, page, cfg


def check_same_or_same_error(specs: list[RequestSpec], pool: int, page: int,
                             cfg: SchedulerConfig, step_time: StepTime, radix: bool) -> None:
    """:func:`check_same`, or both paths raise the same error type (a workload refused up
    front, stuck, or a pool too small for one request, 0.5.9)."""
    try:
        run(specs, pool, page, cfg, False, step_time, radix=radix)
    except (ConfigError, PagedKVError) as e:
        with pytest.raises(type(e)):
            run(specs, pool, page, cfg, True, step_time, radix=radix)
        return
    check_same(specs, pool, page, cfg, step_time, radix=radix)


@settings(max_examples=150, deadline=None)
@given(small_runs(), st.sampled_from((STEP_TIME, FixedStepTime(0.01))))
def test_compiled_core_matches_on_random_workloads(
        case: tuple[list[RequestSpec], int, int, SchedulerConfig], step_time: StepTime) -> None:
    check_same_or_same_error(*case, step_time, radix=False)
