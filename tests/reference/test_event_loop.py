"""The whole scheduler loop: SGLang 0.5.23's own ``Scheduler`` running its real
``event_loop_normal`` and ``event_loop_overlap`` (:mod:`loop_sglang`) against pagedkv's
:class:`~pagedkv.managers.scheduler.Scheduler` (:mod:`loop_pagedkv`) on the same random
workloads (:mod:`drive_loop`), compared at every step: the batch's mode, request ids, extend
and prefix lengths; the chunked request; the retracted requests and the retraction log line
(``#new_tokens_gained``, the ratio before and after); the finished requests;
``available_size()``, ``evictable_size()``, ``new_token_ratio`` and the whole free list.

The workloads cover what the loop decides: arrivals over time (and idle gaps), shared prompt
prefixes with the radix cache on and off, chunked prefill, page sizes 1 and 16, EOS at random
lengths, ignore-EOS requests, request caps, and pools small enough, with a low enough
``schedule_conservativeness``, that decode retracts under real memory pressure; the test
requires that the cases really did (:data:`COVERAGE`).

The overlap loop (SGLang's default) runs its own 300 random cases (the same generator) and
must show what it changes (:data:`OVERLAP_COVERAGE`): a request that samples EOS is given
its next decode slot before the loop sees it finish (its KV released a step late), and
retraction picks victims whose last pass is still in flight. 0.5.23's skip of a decode step
instead of a retraction (requests finishing in flight) is rare in random cases: the seeds
in which it happens (:data:`SKIP_SEEDS`) are compared too, as is SGLang's
``SGLANG_DISABLE_CONSECUTIVE_PREFILL_OVERLAP`` (a prefill's result processed before the
next prefill is launched).

0.5.9's loop: :mod:`test_event_loop_0509`.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

import sgl_boot

sgl_boot.require()

import pytest  # noqa: E402

if sgl_boot.VERSION != "0.5.23":
    pytest.skip(f"the whole-loop comparison runs SGLang 0.5.23's Scheduler (this is "
                f"{sgl_boot.VERSION}; see README.md)", allow_module_level=True)

import compare  # noqa: E402
import drive_loop as D  # noqa: E402
import loop_pagedkv  # noqa: E402
import loop_sglang  # noqa: E402

RANDOM_CASES, BLOCK = 300, 100
# what the random cases must have exercised, at least (cases in which it happened)
COVERAGE = {"retraction": 25, "chunked prefill": 60, "evictable tree": 60, "page size 16": 100,
            "idle step between requests": 3}
SEEN: Counter[str] = Counter()
OVERLAP_COVERAGE = {"retraction": 25, "finish seen a step late": 100, "chunked prefill": 60,
                    "page size 16": 100, "idle step between requests": 3}
OVERLAP_SEEN: Counter[str] = Counter()
# overlap cases past the random ones in which 0.5.23 skips a decode step instead of retracting
SKIP_SEEDS = (394, 623, 674, 898, 1147, 1331, 1893, 1975)


def _sglang(case: D.LoopCase) -> list:
    records = loop_sglang.run(case)
    seen = {"retraction": any(r["retracted"] for r in records),
            "chunked prefill": any(r["chunked"] is not None for r in records),
            "evictable tree": any(r["evictable"] for r in records),
            "page size 16": case.page_size == 16,
            "idle step between requests": any(r["mode"] == "IDLE" for r in records[1:])}
    SEEN.update(k for k, v in seen.items() if v)
    return records


def _sglang_overlap(case: D.LoopCase) -> list:
    records = loop_sglang.run(case)
    late = any(r["mode"] == "DECODE" and set(r["finished"]) & set(r["rids"]) for r in records)
    seen = {"retraction": any(r["retracted"] for r in records),
            "finish seen a step late": late,
            "chunked prefill": any(r["chunked"] is not None for r in records),
            "page size 16": case.page_size == 16,
            "idle step between requests": any(r["mode"] == "IDLE" for r in records[1:])}
    OVERLAP_SEEN.update(k for k, v in seen.items() if v)
    return records


def _overlap_case(seed: int) -> D.LoopCase:
    return D.random_case(seed, overlap=True)


@pytest.mark.parametrize("block", range(RANDOM_CASES // BLOCK))
def test_random_workloads_normal_loop(block: int) -> None:
    compare.compare_seeds("event loop (normal)", range(block * BLOCK, (block + 1) * BLOCK),
                          D.random_case, _sglang, loop_pagedkv.run)


def test_random_workloads_exercised_the_loop() -> None:
    """The random cases above did retract, chunk, cache, page and idle (so a workload change
    cannot quietly stop testing them)."""
    if sum(SEEN.values()) == 0:
        pytest.skip("run with the random cases")
    short = {k: (SEEN[k], n) for k, n in COVERAGE.items() if SEEN[k] < n}
    assert not short, f"cases that exercised each (seen, wanted): {short}"


@pytest.mark.parametrize("block", range(RANDOM_CASES // BLOCK))
def test_random_workloads_overlap_loop(block: int) -> None:
    compare.compare_seeds("event loop (overlap)", range(block * BLOCK, (block + 1) * BLOCK),
                          _overlap_case, _sglang_overlap, loop_pagedkv.run)


def test_random_workloads_exercised_the_overlap_loop() -> None:
    """The overlap cases finished requests a step late, retracted, chunked, paged and idled."""
    if sum(OVERLAP_SEEN.values()) == 0:
        pytest.skip("run with the random overlap cases")
    short = {k: (OVERLAP_SEEN[k], n) for k, n in OVERLAP_COVERAGE.items() if OVERLAP_SEEN[k] < n}
    assert not short, f"cases that exercised each (seen, wanted): {short}"


def test_overlap_skips_a_decode_step_instead_of_retracting() -> None:
    """0.5.23: when the step does not fit and requests finishing in flight (by length) will
    free their KV at its end, the decode step is skipped, not paid for by a retraction."""
    skipped = []

    def sglang(case: D.LoopCase) -> list:
        records = loop_sglang.run(case)
        skipped.append(any(r["skipped"] for r in records))
        return records

    compare.compare_seeds("event loop (overlap)", SKIP_SEEDS, _overlap_case, sglang,
                          loop_pagedkv.run)
    assert all(skipped), dict(zip(SKIP_SEEDS, skipped, strict=True))


def test_overlap_with_consecutive_prefill_overlap_disabled() -> None:
    """``SGLANG_DISABLE_CONSECUTIVE_PREFILL_OVERLAP``: a prefill that follows a prefill is
    launched only after the first one's result is processed."""
    def case(seed: int) -> D.LoopCase:
        return dataclasses.replace(_overlap_case(seed), disable_consecutive_prefill_overlap=True)

    compare.compare_seeds("event loop (overlap)", range(20), case, loop_sglang.run,
                          loop_pagedkv.run)
