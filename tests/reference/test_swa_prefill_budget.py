"""Admission on a sliding-window hybrid: SGLang 0.5.23's ``SWAPrefillBudget``
(``mem_cache/prefill_budget.py``, as its allocator's ``create_prefill_budget`` builds it over a
real ``SWATokenToKVPoolAllocator`` and the FULL + SWA ``UnifiedRadixCache``) against pagedkv's,
after random tree states (cached, locked, tombstoned prefixes; some pools short): one pass of
``check_prefill`` (admit, refuse, or admit with the chunk cut to the SWA room when the request
can never fit the SWA pool whole), ``can_allocate_prefill``, ``available_chunk_tokens``,
``has_capacity`` and ``reserve`` calls with random extends, output budgets, chunk limits (or
none) and extra tokens; page sizes 1, 4, 16.

Compared: every answer and, after every call, the three remaining budgets (total and current
on the full side, SWA).
"""

from __future__ import annotations

import sgl_boot

sgl_boot.require()

import compare  # noqa: E402
import drive_swa_budget as D  # noqa: E402
import pytest  # noqa: E402
import sgl_objects as sg  # noqa: E402
import swa_tree_sglang  # noqa: E402

if sg.OLD:
    pytest.skip("0.5.9 has no prefill budget objects; pagedkv follows 0.5.23's here",
                allow_module_level=True)

RANDOM_CASES, BLOCK = 200, 200


def _args(case: dict) -> tuple[int, int, int, int]:
    return case["page_size"], case["pool_tokens"], case["swa_tokens"], case["window"]


def _run_both(case: dict) -> tuple[list, list]:
    return (D.run(case, swa_tree_sglang.SglangSWATree(*_args(case))),
            D.run(case, D.PagedkvBudget(*_args(case))))


@pytest.mark.parametrize("block", range(RANDOM_CASES // BLOCK))
def test_random_cases(block: int) -> None:
    compare.compare_seeds("SWA prefill budget", range(block * BLOCK, (block + 1) * BLOCK),
                          D.random_case, lambda c: _run_both(c)[0], lambda c: _run_both(c)[1])


@pytest.mark.parametrize("p", (1, 4, 16))
def test_a_prompt_longer_than_the_swa_pool_is_chunked_and_a_short_one_waits(p: int) -> None:
    """Empty pools, an SWA pool of 8 pages, window 2 pages: a prompt of 20 pages is admitted
    with its chunk cut to the SWA room (refused without chunking); a short one fits; after
    reserving a request that takes all but a page of the SWA budget, a short one is refused
    (it only has to wait) and so is the long one (no room for a chunk), and a carried chunk
    gets nothing."""
    calls = [("check", 20 * p, 20 * p + p, p, 64 * p), ("check", 20 * p, 20 * p + p, p, None),
             ("check", p, 2 * p, p, 64 * p), ("reserve", 6 * p, p, 0, None),
             ("check", p, 2 * p, p, 64 * p),
             ("check", 20 * p, 21 * p, 0, 64 * p), ("chunk", 64 * p), ("capacity",)]
    case = {"page_size": p, "pool_tokens": 40 * p, "swa_tokens": 8 * p, "window": 2 * p,
            "setup": [], "calls": calls}
    ours, theirs = _run_both(case)
    compare.same("SWA prefill budget (directed)", ours, theirs, compare.first_difference(ours, theirs))
