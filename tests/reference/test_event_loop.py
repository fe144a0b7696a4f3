"""The whole scheduler loop: SGLang 0.5.23's own ``Scheduler`` running its real
``event_loop_normal`` (:mod:`loop_sglang`) against pagedkv's
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

0.5.9: not compared yet; its ``Scheduler`` boots the same way (README.md, "What is not
compared", says with which stand-ins).
"""

from __future__ import annotations

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


def _sglang(case: D.LoopCase) -> list:
    records = loop_sglang.run(case)
    seen = {"retraction": any(r["retracted"] for r in records),
            "chunked prefill": any(r["chunked"] is not None for r in records),
            "evictable tree": any(r["evictable"] for r in records),
            "page size 16": case.page_size == 16,
            "idle step between requests": any(r["mode"] == "IDLE" for r in records[1:])}
    SEEN.update(k for k, v in seen.items() if v)
    return records


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
