"""The whole scheduler loop on a linear-attention hybrid (Qwen3-Next-like, radix cache off):
SGLang 0.5.23's own ``Scheduler`` built with ``is_hybrid_ssm`` (a real ``HybridReqToTokenPool``
with its ``MambaPool`` and ``MambaSlotAllocator``, the token allocator, and the disabled
``(FULL, MAMBA)`` ``UnifiedRadixCache`` whose mamba component frees a request's slot), running
its real ``event_loop_normal`` and ``event_loop_overlap`` (:mod:`loop_sglang`), against
pagedkv's :class:`~pagedkv.managers.scheduler.Scheduler` given a
:class:`~pagedkv.mem_cache.mamba_pool.MambaPool` (:mod:`loop_pagedkv`), on random workloads
whose state slots cap the running requests (:func:`drive_loop_mamba.random_mamba_case`),
compared at every step: the batch (requests, extend and prefix lengths), the chunked request,
retractions and their log line (with 0.5.23's ``#mamba_num_gained``), finished requests,
``available_size()``, the whole free list, ``new_token_ratio``, and the state slots (free count
and free list, in order) and the request rows' free list.

What the hybrid changes, all exercised (:data:`COVERAGE`): every running request holds a slot,
so the slots bound the batch (a pass stops with requests waiting and every slot held);
retraction and finish give the slot back; a chunked request keeps its slot from chunk to chunk.

:data:`CASES` per loop run in CI (seconds each); the comparison was written with
``PAGEDKV_LOOP_CASES=300`` per loop (0 disagreements), which the variable still selects.
"""

from __future__ import annotations

import os
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
from drive_loop import LoopRequest  # noqa: E402

CASES = int(os.environ.get("PAGEDKV_LOOP_CASES", "30"))  # per loop (normal, overlap)
COVERAGE = {"retraction": 2, "chunked prefill": 5, "page size 16": 10,
            "slots cap the batch": 10, "slot freed by a finish": 20}
SEEN: Counter[str] = Counter()


def _sglang(case: DM.LoopCase) -> list:
    records = loop_sglang.run(case)
    waiting_for_slot = any(r["mamba_available"] == 0 and r["mode"] != "IDLE"
                           for r in records) and case.mamba_slots < len(case.requests)
    seen = {"retraction": any(r["retracted"] for r in records),
            "chunked prefill": any(r["chunked"] is not None for r in records),
            "page size 16": case.page_size == 16,
            "slots cap the batch": waiting_for_slot,
            "slot freed by a finish": any(b["finished"] and b["mamba_available"]
                                          > a["mamba_available"]
                                          for a, b in pairwise(records))}
    SEEN.update(k for k, v in seen.items() if v)
    return records


def test_random_workloads_normal_loop() -> None:
    compare.compare_seeds("event loop, linear attention (normal)", range(CASES),
                          DM.random_mamba_case, _sglang, loop_pagedkv.run)


def test_random_workloads_overlap_loop() -> None:
    compare.compare_seeds("event loop, linear attention (overlap)", range(CASES),
                          lambda seed: DM.random_mamba_case(seed, overlap=True), _sglang,
                          loop_pagedkv.run)


def test_random_workloads_exercised_the_hybrid() -> None:
    """The cases above did retract, chunk, fill every slot and free slots on finishing."""
    if sum(SEEN.values()) == 0:
        pytest.skip("run with the random cases")
    short = {k: (SEEN[k], n) for k, n in COVERAGE.items() if SEEN[k] < n}
    assert not short, f"cases that exercised each (seen, wanted): {short}"


def test_slots_taken_ahead_by_each_pass() -> None:
    """Three 8-token requests (2, 40 and 2 new tokens) on 3 slots, two running at most: the
    first finishes, freeing slot 1 behind slot 3; the third's pass takes slot 3 ahead (one
    waiting request) and puts it back at the end, so the third gets slot 1 (pagedkv's
    ``tests/managers/test_mamba_scheduling.py`` holds the same answer)."""
    reqs = tuple(LoopRequest(0, tuple(range(100 + 10 * i, 108 + 10 * i)), n,
                             tuple(range(500, 500 + n))) for i, n in enumerate((2, 40, 2)))
    case = DM.LoopCase(page_size=4, pool_tokens=256, requests=reqs, radix=False,
                       chunked_prefill_size=16, max_running_requests=2, mamba_slots=3)
    records = loop_sglang.run(case)
    assert [r["mamba_free"] for r in records[:4]] == [[3], [3, 1], [3], [3, 1]]
    compare.compare_seeds("event loop, linear attention (directed)", [0], lambda _: case,
                          lambda _: records, loop_pagedkv.run)
