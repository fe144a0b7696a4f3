"""The compiled core with the radix cache on, against the Python scheduler (the reference).

The radix-off contract's workloads (``test_compiled_core.py``), as they are (token ids made
up: a request's own prompt is cached and hit again after its retraction) and behind a shared
system prompt (``with_system_prompt``: admission matches it, the tree splits, locks and
evicts), page sizes 1 and 16, both releases, both loops: the same requests' fields, steps,
counters, totals, events, log lines (``#cached-token``, ``#token``) and allocator state, and
the same tree at the end (every node's id, parent, key, slots, lock and access time,
children in order; sizes, evicted slots, the next id and tick, the LRU order). Then random
small workloads with token ids from a small vocabulary (many partial matches), some with
known outputs (hypothesis).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedkv.errors import ConfigError
from pagedkv.managers import SchedulerConfig
from pagedkv.managers.compiled_core import numba_available
from pagedkv.model_executor.sim_executor import FixedStepTime, StepTime
from pagedkv.workloads.prefix import with_system_prompt
from pagedkv.workloads.synthetic import RequestSpec

pytestmark = pytest.mark.skipif(not numba_available(), reason="numba is not installed")

from tests.managers.test_compiled_core import (  # noqa: E402
    STEP_TIME,
    check_same,
    check_same_or_same_error,
    config,
    run,
    small_runs,
    workload,
)

SYSTEM_LEN = 40


def radix_workload(seed: int, page: int, shared: bool) -> tuple[list[RequestSpec], int]:
    """The radix-off contract's workload (Poisson arrivals for odd seeds), behind a shared
    system prompt if ``shared`` (its pool grown by three system prompts)."""
    specs, pool = workload(seed, page, seed % 2 == 1)
    if not shared:
        return specs, pool
    return with_system_prompt(specs, SYSTEM_LEN, seed), pool + (3 * SYSTEM_LEN // page + 1) * page


RADIX_CASES = [(seed, page, shared, version, overlap)
               for seed in range(8) for page in (1, 16) for shared in (False, True)
               for version in ("0.5.23", "0.5.9") for overlap in (True, False)]


@pytest.mark.parametrize(("seed", "page", "shared", "version", "overlap"), RADIX_CASES)
def test_compiled_core_matches_the_reference_with_the_radix_cache(
        seed: int, page: int, shared: bool, version: str, overlap: bool) -> None:
    specs, pool = radix_workload(seed, page, shared)
    try:
        check_same(specs, pool, page, config(seed, page, version, overlap), radix=True)
    except ConfigError:  # a request this pool could never admit
        pytest.skip("workload refused up front")


def test_the_radix_cases_hit_evict_and_retract() -> None:
    """The comparison is worth something only if the tree hits and evicts and requests
    retract and chunk: count them over the reference's 0.5.23 overlap runs with a shared
    system prompt."""
    cached = evicted = retractions = chunks = 0
    for seed, page, shared, version, overlap in RADIX_CASES:
        if version != "0.5.23" or not overlap or not shared:
            continue
        specs, pool = radix_workload(seed, page, shared)
        s, _, _ = run(specs, pool, page, config(seed, page, version, overlap), False,
                          radix=True)
        cached += sum(r.cached_tokens for r in s.reqs)
        evicted += s.tree_cache.evicted_tokens
        t = s.trace.totals()
        retractions += t.retraction_events
        chunks += t.chunk_events
    assert cached > 10_000 and evicted > 10_000 and retractions > 10 and chunks > 1000


@st.composite
def radix_runs(draw: st.DrawFn) -> tuple[list[RequestSpec], int, int, SchedulerConfig]:
    """:func:`small_runs`'s runs with token ids from a small vocabulary behind a common
    head (so prompts share prefixes of every length), some with known output ids."""
    specs, pool, page, cfg = draw(small_runs())
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    vocab = draw(st.sampled_from((2, 3, 50)))
    head = rng.integers(0, vocab, 100)
    out = []
    for s in specs:
        shared = int(rng.integers(0, s.prompt_len + 1))
        ids = np.concatenate((head[:shared], rng.integers(0, vocab, s.prompt_len - shared)))
        known = (tuple(int(t) for t in rng.integers(0, vocab, s.output_len))
                 if draw(st.booleans()) else None)
        out.append(RequestSpec(s.prompt_len, s.output_len, s.max_new_tokens, s.arrival_s,
                               ids.astype(np.int64), known, None, s.ignore_eos))
    return out, pool, page, cfg


@settings(max_examples=60, deadline=None)
@given(radix_runs(), st.sampled_from((STEP_TIME, FixedStepTime(0.01))))
def test_compiled_core_matches_on_random_workloads_with_the_radix_cache(
        case: tuple[list[RequestSpec], int, int, SchedulerConfig], step_time: StepTime) -> None:
    check_same_or_same_error(*case, step_time, radix=True)
