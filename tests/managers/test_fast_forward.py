"""The fast path against the step-by-step reference: the same run, to the last slot.

Seeded random workloads (page sizes 1 and 16, pools small enough to retract, all arriving at
once or Poisson, both SGLang releases, chunked prefill small enough to chunk, the radix cache
off and on) run twice: with the fast path (``fast_forward=True``, the default) and with it
forced off. Everything must match: every request's metrics, the step count, every step row,
event and log line the trace keeps, the totals a summary trace keeps, and the allocator's
final state (the free list in order, every slot's state, every page-table row), and for the
first four seeds the page record the visualizer draws (owners, rows, lengths). The
documented switch ``simulate(fast_forward=False)`` is checked on SGLang's own pool too.
"""

from __future__ import annotations

import numpy as np
import pytest

from pagedkv.entrypoints import simulate
from pagedkv.errors import ConfigError
from pagedkv.managers import Scheduler, SchedulerConfig
from pagedkv.managers.trace import TraceMeta
from pagedkv.managers.trace_summary import SummaryTrace
from pagedkv.model_executor.sim_executor import RooflineStepTime
from pagedkv.workloads.synthetic import RequestSpec, sharegpt_like

# decode time grows with the KV read (1 ms + 1 us per KV token): arrivals land mid-window
STEP_TIME = RooflineStepTime(weights_bytes=10**6, num_params=10**6, cell_size=1000,
                             hbm_bandwidth=1e9, peak_flops=1e12)
REQ_KEYS = ("generated", "finish_reason", "arrival_s", "queue_s", "first_admit_s",
            "first_token_s", "finish_s", "num_retractions", "recomputed_tokens", "cached_tokens",
            "kv_committed_len", "req_pool_idx")


def workload(seed: int, page: int, poisson: bool) -> tuple[list[RequestSpec], int]:
    """Requests with ShareGPT-ish spread (some long outputs, so decode runs between
    events), and a pool that holds a few of them at once."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(10, 60))
    prompt = rng.integers(1, 120, n)
    out = np.maximum(1, rng.geometric(1 / 60, n))
    arrival = np.cumsum(rng.exponential(0.02, n)) if poisson else np.zeros(n)
    specs = [RequestSpec(int(p), int(o), int(o + rng.integers(0, 20)), float(a),
                         ignore_eos=bool(rng.random() < 0.1))
             for p, o, a in zip(prompt, out, arrival, strict=True)]
    biggest = max(s.prompt_len + s.max_new_tokens for s in specs)
    pool = -(-int(biggest * rng.uniform(1.2, 4.0)) // page) * page + 4 * page
    return specs, pool


def run(specs: list[RequestSpec], pool: int, page: int, cfg: SchedulerConfig, radix: bool,
        fast: bool, summary: bool = False, pages: bool = False) -> tuple[Scheduler, int]:
    """Run to the end (with the page record if ``pages``); return the scheduler and how
    many fast-forward windows it took."""
    trace = None
    if summary:
        trace = SummaryTrace(TraceMeta(pool, page))
    s = Scheduler(specs, max_total_num_tokens=pool, page_size=page, config=cfg,
                  radix_cache=radix, step_time=STEP_TIME, fast_forward=fast, trace=trace,
                  record_pages=pages)
    assert (s.fast_forward is not None) == fast
    s.run()
    return s, 0 if s.fast_forward is None else s.fast_forward.windows_taken


def final_state(s: Scheduler) -> dict[str, object]:
    """What a run leaves behind: requests, counters, the allocator and the page table."""
    a = s.allocator
    return {
        "reqs": [[getattr(r, k) for k in REQ_KEYS] for r in s.reqs],
        "counters": (s.num_steps, s.counters.num_decode_steps, s.counters.decoded, s.clock,
                     s.new_token_ratio),
        "free_pages": a.free_pages.tolist(),
        "slot_state": a.slot_state.numpy().tobytes(),
        "req_to_token": s.req_to_token_pool.req_to_token.numpy().tobytes(),
        "free_rows": list(s.req_to_token_pool.free_slots),
    }


CASES = [(seed, page, poisson, version, radix)
         for seed in range(8) for page in (1, 16) for poisson in (False, True)
         for version in ("0.5.23", "0.5.9") for radix in (False, True) if seed < 4 or not radix]
# the overlap loop (SGLang's default) takes windows too: the same comparison on its own cases
OVERLAP_CASES = [c for c in CASES if c[0] < 4]


@pytest.mark.parametrize(("seed", "page", "poisson", "version", "radix"), CASES)
def test_fast_path_matches_single_steps(seed: int, page: int, poisson: bool, version: str,
                                        radix: bool) -> None:
    specs, pool = workload(seed, page, poisson)
    chunk = (None, 2 * page, 4 * page, 64)[seed % 4]
    cfg = SchedulerConfig(chunked_prefill_size=None if chunk is None else max(chunk, page),
                          max_prefill_tokens=(64, 16384)[seed % 2],
                          new_token_ratio_decay_steps=(20, 600)[seed % 3 == 0],
                          schedule_conservativeness=(0.3, 1.0)[seed % 2],
                          sglang_version=version)
    pages = seed < 4  # the page record (owners, rows, lengths) too, entry for entry
    try:
        slow, slow_windows = run(specs, pool, page, cfg, radix, fast=False, pages=pages)
    except ConfigError:  # an ignore-EOS request this pool could never admit
        pytest.skip("workload refused up front")
    fast, windows = run(specs, pool, page, cfg, radix, fast=True, pages=pages)
    assert slow_windows == 0 and windows > 0
    assert fast.trace.to_dict() == slow.trace.to_dict()  # every row, event and log line
    assert final_state(fast) == final_state(slow)
    lean, _ = run(specs, pool, page, cfg, radix, fast=True, summary=True)
    assert lean.trace.totals() == slow.trace.totals()
    assert final_state(lean) == final_state(slow)


def test_the_cases_exercise_the_fast_path() -> None:
    """The comparison above is worth something only if windows are taken, retractions
    happen and prefills chunk: count them over the radix-off cases."""
    windows = retractions = chunks = 0
    for seed, page, poisson, version, radix in CASES:
        if radix:
            continue
        specs, pool = workload(seed, page, poisson)
        cfg = SchedulerConfig(chunked_prefill_size=max(2 * page, page), sglang_version=version)
        try:
            s, w = run(specs, pool, page, cfg, radix, fast=True)
        except ConfigError:
            continue
        windows += w
        retractions += len(s.trace.events_of("retract"))
        chunks += len(s.trace.events_of("chunk"))
    assert windows > 100 and retractions > 10 and chunks > 100


@pytest.mark.parametrize("page", [1, 16])
def test_simulate_switch_gives_the_same_run(page: int) -> None:
    """``simulate(fast_forward=False)``, the documented switch, on SGLang's pool for
    Llama-3-8B (roofline step times, ShareGPT-like lengths, Poisson arrivals, radix cache
    off): the same trace and metrics as the default."""
    specs = sharegpt_like(800, rate=20.0, seed=3)
    runs = [simulate(specs, max_total_tokens=40000, page_size=page, radix_cache=False,
                     fast_forward=fast) for fast in (True, False)]
    assert runs[0].trace.to_dict() == runs[1].trace.to_dict()
    assert runs[0].metrics == runs[1].metrics
    assert [[getattr(r, k) for k in REQ_KEYS] for r in runs[0].requests] == [
        [getattr(r, k) for k in REQ_KEYS] for r in runs[1].requests]


@pytest.mark.parametrize(("seed", "page", "poisson", "version", "radix"), OVERLAP_CASES)
def test_overlap_fast_path_matches_single_steps(seed: int, page: int, poisson: bool,
                                                version: str, radix: bool) -> None:
    """The overlap loop's windows (:meth:`DecodeStepRunner.run_decode_window` in the overlap loop) give
    the run its single steps give: every row, event, log line and slot."""
    specs, pool = workload(seed, page, poisson)
    chunk = (None, 2 * page, 4 * page, 64)[seed % 4]
    cfg = SchedulerConfig(chunked_prefill_size=None if chunk is None else max(chunk, page),
                          schedule_conservativeness=(0.3, 1.0)[seed % 2],
                          disable_overlap_schedule=False, sglang_version=version)
    try:
        slow, _ = run(specs, pool, page, cfg, radix, fast=False, pages=seed < 2)
    except ConfigError:
        pytest.skip("workload refused up front")
    fast, windows = run(specs, pool, page, cfg, radix, fast=True, pages=seed < 2)
    assert windows > 0
    assert fast.trace.to_dict() == slow.trace.to_dict()
    assert final_state(fast) == final_state(slow)
