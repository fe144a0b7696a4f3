"""The whole scheduler loop on a sliding-window hybrid: SGLang 0.5.23's own ``Scheduler`` built
with ``is_hybrid_swa`` (its ``SWATokenToKVPoolAllocator`` over a real ``SWAKVPool`` and the
``(FULL, SWA)`` ``UnifiedRadixCache``, enabled or disabled), running its real
``event_loop_normal`` and ``event_loop_overlap`` (:mod:`loop_sglang`), against pagedkv's
:class:`~pagedkv.managers.scheduler.Scheduler` on the same pools (:mod:`loop_pagedkv`), on
random workloads with a short window (:func:`drive_loop_swa.random_swa_case`), compared at
every step: the batch, the chunked request, retractions and their log line, finished requests,
``available_size()`` (the smaller of the two pools), both pools' free slots and whole free
lists, the tree's full and SWA evictable tokens, ``new_token_ratio``.

What the hybrid changes, all exercised (:data:`COVERAGE`): admission charging the SWA budget,
decode steps releasing the window every ``SGLANG_SWA_EVICTION_INTERVAL`` tokens (1, 2, 4 or the
default 128), checkpoints releasing it and branching where the window did not allow a longer
match (``swa_branching_seqlen``), the tree evicting full and SWA slots apart (tombstones),
retraction and finish freeing both pools, and with the radix cache off, chunks releasing the
window before the next chunk.

A case SGLang's own loop never finishes (admission refuses the waiting requests forever while
nothing runs, e.g. a matched prefix locked out of the room it needs) is compared too: pagedkv
must refuse it as well (its named ``stuck`` error); the seeds in which that happens are counted.
"""

from __future__ import annotations

from collections import Counter
from itertools import pairwise

import sgl_boot

sgl_boot.require()

import pytest  # noqa: E402

if sgl_boot.VERSION != "0.5.23":
    pytest.skip(f"the hybrid loop runs SGLang 0.5.23's Scheduler (this is {sgl_boot.VERSION})",
                allow_module_level=True)

import compare  # noqa: E402
import drive_loop_swa as DS  # noqa: E402
import loop_pagedkv  # noqa: E402
import loop_sglang  # noqa: E402

from pagedkv.errors import PagedKVError  # noqa: E402

CASES = 40  # per loop (normal, overlap); 300 + 300 when written, also 0 disagreements
STUCK = ["stuck"]  # the record of a case the loop never finishes
COVERAGE = {"retraction": 3, "chunked prefill": 8, "radix off": 8, "page size 16": 15,
            "window released in decode": 30, "SWA evictable in the tree": 15, "stuck": 1}
SEEN: Counter[str] = Counter()


def _sglang(case: DS.LoopCase) -> list:
    try:
        records = loop_sglang.run(case)
    except RuntimeError as e:
        if not str(e).startswith("stuck"):
            raise
        SEEN["stuck"] += 1
        return STUCK
    released = any(b["mode"] == "DECODE" and b["swa_available"] > a["swa_available"]
                   for a, b in pairwise(records))
    seen = {"retraction": any(r["retracted"] for r in records),
            "chunked prefill": any(r["chunked"] is not None for r in records),
            "radix off": not case.radix, "page size 16": case.page_size == 16,
            "window released in decode": released,
            "SWA evictable in the tree": any(r["swa_evictable"] for r in records)}
    SEEN.update(k for k, v in seen.items() if v)
    return records


def _pagedkv(case: DS.LoopCase) -> list:
    try:
        return loop_pagedkv.run(case)
    except PagedKVError as e:
        if str(e).startswith("stuck"):
            return STUCK
        raise


def test_random_workloads_normal_loop() -> None:
    compare.compare_seeds("event loop, sliding window (normal)", range(CASES),
                          DS.random_swa_case, _sglang, _pagedkv)


def test_random_workloads_overlap_loop() -> None:
    compare.compare_seeds("event loop, sliding window (overlap)", range(CASES),
                          lambda seed: DS.random_swa_case(seed, overlap=True), _sglang, _pagedkv)


def test_random_workloads_exercised_the_hybrid() -> None:
    """The cases above did retract, chunk, release windows, tombstone and refuse."""
    if sum(SEEN.values()) == 0:
        pytest.skip("run with the random cases")
    short = {k: (SEEN[k], n) for k, n in COVERAGE.items() if SEEN[k] < n}
    assert not short, f"cases that exercised each (seen, wanted): {short}"
