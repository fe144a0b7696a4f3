"""A running request's window release and row free on a sliding-window hybrid: SGLang
0.5.23's own ``free_swa_out_of_window_slots`` and ``free_kv_row_segments``
(``mem_cache/common.py``, on real ``Req`` objects whose ``req.kv`` holds the release cursor,
the tree-owned prefix and the eviction floor) against ``pagedkv.mem_cache.swa_window``, on
random requests that grow by chunks and decode steps and release with or without prefix
sharing, a ``retain_floor`` and eviction intervals 1-3; page sizes 1, 2, 4, 16.

Compared after every step: the cursor each release leaves, both pools' free-slot counts, both
free lists and the whole full->SWA mapping (so which SWA pages each release gave back, in which
order, and the final frees: full side only below the cursor).
"""

from __future__ import annotations

import sgl_boot

sgl_boot.require()

import compare  # noqa: E402
import drive_swa_window as D  # noqa: E402
import pytest  # noqa: E402
import sgl_objects as sg  # noqa: E402
import swa_window_sglang  # noqa: E402

if sg.OLD:
    pytest.skip("pagedkv follows SGLang 0.5.23's window release only", allow_module_level=True)

RANDOM_CASES, BLOCK = 200, 200


@pytest.mark.parametrize("block", range(RANDOM_CASES // BLOCK))
def test_random_cases(block: int) -> None:
    compare.compare_seeds("SWA window release", range(block * BLOCK, (block + 1) * BLOCK),
                          D.random_case, lambda c: D.run(c, swa_window_sglang.SglangWindow),
                          lambda c: D.run(c, D.PagedkvWindow))


@pytest.mark.parametrize("p", D.PAGE_SIZES)
@pytest.mark.parametrize("sharing", [False, True])
def test_decode_past_the_window_releases_whole_pages_behind_it(p: int, sharing: bool) -> None:
    """A request on a tree-owned page decodes past its window step by step, releasing each
    step (interval 1), then finishes: released pages come back full side only."""
    steps = [("grow", "r0", 3 * p + 1)]
    for _ in range(2 * p + 2):
        steps += [("grow", "r0", 1), ("release", "r0", 0, sharing, None, 1)]
    steps.append(("finish", "r0", True))
    case = {"page_size": p, "window": p + 1, "pool_tokens": 30 * p, "swa_tokens": 12 * p,
            "prefix_pages": 1, "requests": {"r0": (1, 0)}, "steps": steps}
    ours = D.run(case, swa_window_sglang.SglangWindow)
    theirs = D.run(case, D.PagedkvWindow)
    compare.same("SWA window release (directed)", ours, theirs, compare.first_difference(ours, theirs))
