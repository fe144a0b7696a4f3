"""The whole scheduler loop on a linear-attention hybrid with the radix cache on, as SGLang
0.5.23's default server runs Qwen3-Next: SGLang's own ``Scheduler`` (the ``(FULL, MAMBA)``
``UnifiedRadixCache`` enabled, ``HybridReqToTokenPool`` with its ping-pong track slots:
the ``extra_buffer`` strategy with the overlap loop or pages over one token, else
``no_buffer``) running its real ``event_loop_normal`` and ``event_loop_overlap``
(:mod:`loop_sglang`), against pagedkv's :class:`~pagedkv.managers.scheduler.Scheduler` with
a :class:`~pagedkv.mem_cache.mamba_pool.MambaPool` and the radix cache on
(:class:`~pagedkv.mem_cache.mamba_cache.MambaPrefixCache`, :mod:`loop_pagedkv`), on
workloads whose requests share long prefixes (:func:`drive_loop_mamba.random_mamba_radix_case`).

Compared at every step: the batch (requests, extend and matched prefix lengths), the chunked
request, retractions and their log line (``#mamba_num_gained``: the live slot and the track
slots), finished requests, the KV free list and ``available_size()``, the tree's evictable
tokens, the state slots' free list (in order) and the request rows', ``new_token_ratio``, and
what the tree holds: its KV slots, its state slots and its four sizes (SGLang runs its Rust
tree core, which lists no nodes; the nodes themselves are compared in
``test_mamba_radix_tree.py``). Also checked on SGLang's side: a retracted request gives back
``1 + mamba_tracking_slots`` state slots, later requests reuse earlier ones' checkpointed
states, and every state slot ends free or in the tree.

:data:`CASES` per loop run in CI; the comparison was written with ``PAGEDKV_LOOP_CASES=300``
per loop (0 disagreements), which the variable still selects.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from itertools import pairwise

import sgl_boot

sgl_boot.require()

import pytest  # noqa: E402

if sgl_boot.VERSION != "0.5.23":
    pytest.skip(f"the hybrid loop runs SGLang 0.5.23's Scheduler (this is {sgl_boot.VERSION})",
                allow_module_level=True)

import compare  # noqa: E402
import drive_loop_mamba as DM  # noqa: E402
import loop_pagedkv  # noqa: E402
import loop_sglang  # noqa: E402

from pagedkv.hybrid_pools import MAMBA_SLOTS_PER_REQUEST_WITH_RADIX as MAMBA_SLOTS_WITH_RADIX  # noqa: E402
from pagedkv.hybrid_pools import mamba_tracking_slots  # noqa: E402

CASES = int(os.environ.get("PAGEDKV_LOOP_CASES", "30"))  # per loop (normal, overlap)
SEEN: Counter[str] = Counter()
RETRACT = re.compile(r"#retracted_reqs: (\d+), .*#mamba_num_gained: (\d+)")


def _sglang(case: DM.LoopCase) -> list:
    """SGLang's records for ``case``, checked and counted (:data:`SEEN`)."""
    records = loop_sglang.run(case)
    track = mamba_tracking_slots(disable_radix_cache=False, page_size=case.page_size,
                                 disable_overlap_schedule=not case.overlap, auto_extra_buffer=True)
    for line in (x for r in records for x in r["retract_log"]):
        m = RETRACT.search(line)
        if m:
            assert int(m.group(2)) == int(m.group(1)) * (1 + track), line
            SEEN["retraction"] += 1
    admitted: set[int] = set()
    for r in records:
        if r["mode"] != "EXTEND":
            continue
        for rid, prefix in zip(r["rids"], r["prefix"], strict=True):
            if rid not in admitted and prefix > 0:
                SEEN["a first prefill on a cached prefix"] += 1
            admitted.add(rid)
    SEEN["chunked prefill"] += any(r["chunked"] is not None for r in records)
    SEEN["no_buffer (pages of one token, normal loop)"] += track == 0
    SEEN["a state evicted from the tree"] += any(
        b["tree_sizes"][2] + b["tree_sizes"][3] < a["tree_sizes"][2] + a["tree_sizes"][3]
        for a, b in pairwise(records))
    last = records[-1]
    assert last["mamba_available"] + last["mamba_in_tree"] == case.mamba_slots, last
    return records


@pytest.mark.parametrize("overlap", [False, True], ids=["normal", "overlap"])
def test_random_workloads(overlap: bool) -> None:
    compare.compare_seeds(
        f"event loop, linear attention, radix cache ({'overlap' if overlap else 'normal'})",
        range(CASES), lambda seed: DM.random_mamba_radix_case(seed, overlap), _sglang,
        loop_pagedkv.run)


@pytest.mark.parametrize(("page_size", "overlap"), [(1, False), (16, False), (1, True)],
                         ids=["no_buffer", "extra_buffer-1-track-slot", "extra_buffer-overlap"])
def test_identical_requests_find_their_state_in_the_tree(page_size: int, overlap: bool) -> None:
    """Three identical 150-token requests (300 identical new tokens each, past the 256-token
    track interval) prefilled together: the second and third checkpoints, and finishes,
    find the first's state at the same node (``mamba_exist``), so the state they bring is
    freed, not kept; the state slots are those SGLang's sizing gives three running requests."""
    prompt = tuple(range(100, 250))
    outputs = tuple(range(300, 600))
    reqs = tuple(DM.LoopRequest(0, prompt, 300, outputs) for _ in range(3))
    track = mamba_tracking_slots(disable_radix_cache=False, page_size=page_size,
                                 disable_overlap_schedule=not overlap, auto_extra_buffer=True)
    case = DM.LoopCase(page_size=page_size, pool_tokens=2048, requests=reqs, radix=True,
                       max_running_requests=3, mamba_slots=3 * (MAMBA_SLOTS_WITH_RADIX + track),
                       context_len=4096, overlap=overlap)
    compare.compare_seeds("event loop, linear attention, radix cache (directed)", [0],
                          lambda _: case, _sglang, loop_pagedkv.run)


def test_the_cases_exercised_the_cache() -> None:
    """The cases above reused cached states, retracted, chunked, ran ``no_buffer`` and
    evicted states from the tree."""
    if sum(SEEN.values()) == 0:
        pytest.skip("run with the random cases")
    assert SEEN["a first prefill on a cached prefix"] >= CASES // 2, SEEN
    for what in ("retraction", "chunked prefill", "no_buffer (pages of one token, normal loop)",
                 "a state evicted from the tree"):
        assert SEEN[what] >= 1, (what, SEEN)
