"""The fast path on a linear-attention hybrid against the step-by-step reference.

A request's state slot is taken at admission and given back at finish or retraction, never
during a decode step, so a window of quiet decode steps touches no slot; only the step time
changes (every decode step reads and writes each running request's state,
``RooflineStepTime.state_bytes``). Random workloads (hypothesis: page sizes 1 and 16, pools
and slot counts tight enough to retract and to stop admission, all at once or Poisson, both
loops, both releases) run with the fast path and without it: the trace (every row, event and
log line), every request's metrics, the token pool's and the state slots' final state must
be the same.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pagedkv.configs.mamba_utils import Mamba2CacheParams, Mamba2StateShape
from pagedkv.errors import ConfigError
from pagedkv.managers import Scheduler, SchedulerConfig
from pagedkv.mem_cache.mamba_pool import HybridReqToTokenPool, MambaPool
from pagedkv.model_executor.sim_executor import RooflineStepTime
from pagedkv.workloads.synthetic import RequestSpec

STATE = Mamba2CacheParams(Mamba2StateShape.create(
    tp_world_size=1, intermediate_size=8, n_groups=2, num_heads=2, head_dim=4, state_size=4,
    conv_kernel=4), (0, 1))
# 1 ms + 1 us per KV token + 2 us per running request's state: arrivals land mid-window
STEP_TIME = RooflineStepTime(weights_bytes=10**6, num_params=10**6, cell_size=1000,
                             hbm_bandwidth=1e9, peak_flops=1e12, state_bytes=1000)
REQ_KEYS = ("generated", "finish_reason", "arrival_s", "queue_s", "first_admit_s",
            "first_token_s", "finish_s", "num_retractions", "recomputed_tokens",
            "kv_committed_len", "req_pool_idx", "mamba_pool_idx")


def workload(seed: int, page: int, poisson: bool) -> tuple[list[RequestSpec], int, int]:
    """Requests with long outputs (decode runs between events), a token pool that holds a
    few of them, and the state slots (a few, or one per request)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(10, 60))
    prompt = rng.integers(1, 100, n)
    out = np.maximum(1, rng.geometric(1 / 50, n))
    arrival = np.cumsum(rng.exponential(0.02, n)) if poisson else np.zeros(n)
    specs = [RequestSpec(int(p), int(o), int(o + rng.integers(0, 20)), float(a),
                         ignore_eos=bool(rng.random() < 0.1))
             for p, o, a in zip(prompt, out, arrival, strict=True)]
    biggest = max(s.prompt_len + s.max_new_tokens for s in specs)
    pool = -(-int(biggest * rng.uniform(1.1, 2.5)) // page) * page + 4 * page
    slots = int(rng.integers(1, 12)) if rng.random() < 0.5 else n  # a few, or one each
    return specs, pool, slots


def run(specs: list[RequestSpec], pool: int, slots: int, page: int, cfg: SchedulerConfig,
        fast: bool) -> Scheduler:
    s = Scheduler(specs, max_total_num_tokens=pool, page_size=page, config=cfg,
                  radix_cache=False, step_time=STEP_TIME, fast_forward=fast,
                  mamba_pool=MambaPool(slots, STATE))
    assert (s.fast_forward is not None) == fast
    s.run()
    return s


def final_state(s: Scheduler) -> dict[str, object]:
    """What a run leaves behind: requests, counters, the token pool, rows and state slots."""
    a, rows = s.allocator, s.req_to_token_pool
    assert isinstance(rows, HybridReqToTokenPool)
    return {
        "reqs": [[getattr(r, k) for k in REQ_KEYS] for r in s.reqs],
        "counters": (s.num_steps, s.counters.num_decode_steps, s.counters.decoded, s.clock,
                     s.new_token_ratio),
        "free_pages": a.free_pages.tolist(),
        "slot_state": a.slot_state.numpy().tobytes(),
        "req_to_token": rows.req_to_token.numpy().tobytes(),
        "free_rows": list(rows.free_slots),
        "free_state_slots": list(rows.mamba_allocator.free_slots),
    }


def config(seed: int, page: int, overlap: bool, version: str) -> SchedulerConfig:
    chunk = (None, 2 * page, 4 * page, 64)[seed % 4]
    return SchedulerConfig(chunked_prefill_size=None if chunk is None else max(chunk, page),
                           schedule_conservativeness=(0.3, 1.0)[seed % 2],
                           new_token_ratio_decay_steps=(20, 600)[seed % 3 == 0],
                           disable_overlap_schedule=not overlap, sglang_version=version)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1), st.sampled_from([1, 16]), st.booleans(), st.booleans(),
       st.sampled_from(["0.5.23", "0.5.9"]))
def test_fast_path_matches_single_steps(seed: int, page: int, poisson: bool, overlap: bool,
                                        version: str) -> None:
    specs, pool, slots = workload(seed, page, poisson)
    cfg = config(seed, page, overlap, version)
    try:
        slow = run(specs, pool, slots, page, cfg, fast=False)
    except ConfigError:  # an ignore-EOS request this pool could never admit
        return
    fast = run(specs, pool, slots, page, cfg, fast=True)
    assert fast.trace.to_dict() == slow.trace.to_dict()  # every row, event and log line
    assert final_state(fast) == final_state(slow)


def test_the_cases_take_windows_and_retract() -> None:
    """The comparison is worth something only if windows are taken on these pools, requests
    are retracted and admission waits for a state slot: count them over fixed seeds."""
    windows = retractions = slot_waits = 0
    for seed in range(24):
        page, overlap = (1, 16)[seed % 2], seed % 3 != 0
        specs, pool, slots = workload(seed, page, seed % 4 < 2)
        try:
            s = run(specs, pool, slots, page, config(seed, page, overlap, "0.5.23"), fast=True)
        except ConfigError:
            continue
        assert s.fast_forward is not None
        windows += s.fast_forward.windows_taken
        retractions += len(s.trace.events_of("retract"))
        slot_waits += slots < len(specs)
    assert windows > 50 and retractions > 5 and slot_waits > 5
