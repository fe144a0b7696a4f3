"""The whole scheduler loop under SGLang 0.5.9: its own ``Scheduler`` running its real
``event_loop_normal`` and ``event_loop_overlap`` (:mod:`loop_sglang_0509`) against pagedkv's
:class:`~pagedkv.managers.scheduler.Scheduler` following 0.5.9 (:mod:`loop_pagedkv`), on the
random workloads of :mod:`drive_loop`, compared at every step as :mod:`test_event_loop`
compares 0.5.23's (the same records).
"""

from __future__ import annotations

import functools
from collections import Counter

import sgl_boot

sgl_boot.require()

import pytest  # noqa: E402

if sgl_boot.VERSION != "0.5.9":
    pytest.skip(f"runs SGLang 0.5.9's Scheduler (this is {sgl_boot.VERSION}; "
                "test_event_loop.py runs 0.5.23's)", allow_module_level=True)

import compare  # noqa: E402
import drive_loop as D  # noqa: E402
import loop_pagedkv  # noqa: E402
import loop_sglang_0509  # noqa: E402

CASES = 60  # per loop; CI's time budget (each case boots 0.5.9's Scheduler)
SEEN: Counter[str] = Counter()
# what the cases must have exercised, at least (cases in which it happened, per loop)
COVERAGE = {"retraction": 3, "chunked prefill": 12, "page size 16": 18}
pagedkv_0509 = functools.partial(loop_pagedkv.run, release="0.5.9")


def _sglang(loop: str, case: D.LoopCase) -> list:
    records = loop_sglang_0509.run(case)
    seen = {"retraction": any(r["retracted"] for r in records),
            "chunked prefill": any(r["chunked"] is not None for r in records),
            "page size 16": case.page_size == 16}
    SEEN.update(f"{loop}: {k}" for k, v in seen.items() if v)
    return records


@pytest.mark.parametrize("overlap", [False, True], ids=["normal", "overlap"])
def test_random_workloads(overlap: bool) -> None:
    loop = "overlap" if overlap else "normal"
    compare.compare_seeds(f"event loop 0.5.9 ({loop})", range(CASES),
                          functools.partial(D.random_case, overlap=overlap),
                          functools.partial(_sglang, loop), pagedkv_0509)
    short = {k: (SEEN[f"{loop}: {k}"], n) for k, n in COVERAGE.items() if SEEN[f"{loop}: {k}"] < n}
    assert not short, f"cases that exercised each (seen, wanted): {short}"
