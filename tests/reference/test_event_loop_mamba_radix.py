"""SGLang 0.5.23's own scheduler loop on a linear-attention hybrid with the radix cache on, as
its default server runs Qwen3-Next (the ``extra_buffer`` strategy: the ``(FULL, MAMBA)``
``UnifiedRadixCache`` enabled, ``HybridReqToTokenPool`` with its ping-pong track slots), on
workloads whose requests share long prefixes (:func:`drive_loop_mamba.random_mamba_radix_case`).

SGLang's side only: pagedkv's scheduler refuses the radix cache on these models (the tree is
compared with SGLang's in ``test_mamba_radix_tree.py``; the scheduler's state checkpoints into
it are not modelled), so this runs SGLang's loop (:mod:`loop_sglang`, both loops) and checks
what pagedkv says of it: a retracted request gives back ``1 + mamba_tracking_slots`` state
slots (its live slot and its track slots, :func:`pagedkv.hybrid_pools.mamba_tracking_slots`:
2 with the overlap loop, 1 without), later requests reuse earlier ones' checkpointed states
(a first prefill on a cached prefix), and every state slot is back when the run ends, held
by the tree or free. It is the reference a scheduler run with the radix cache on would be
compared with, step by step, as ``test_event_loop_mamba.py`` compares the disabled cache.
"""

from __future__ import annotations

import os
import re
from collections import Counter

import sgl_boot

sgl_boot.require()

import pytest  # noqa: E402

if sgl_boot.VERSION != "0.5.23":
    pytest.skip(f"the hybrid loop runs SGLang 0.5.23's Scheduler (this is {sgl_boot.VERSION})",
                allow_module_level=True)

import drive_loop_mamba as DM  # noqa: E402
import loop_sglang  # noqa: E402

from pagedkv.hybrid_pools import mamba_tracking_slots  # noqa: E402

CASES = int(os.environ.get("PAGEDKV_LOOP_CASES", "30"))  # per loop (normal, overlap)
SEEN: Counter[str] = Counter()
RETRACT = re.compile(r"#retracted_reqs: (\d+), .*#mamba_num_gained: (\d+)")


def _check(seed: int, overlap: bool) -> None:
    case = DM.random_mamba_radix_case(seed, overlap)
    records = loop_sglang.run(case)
    track = mamba_tracking_slots(disable_radix_cache=False, page_size=case.page_size,
                                 disable_overlap_schedule=not overlap, auto_extra_buffer=True)
    for line in (x for r in records for x in r["retract_log"]):
        m = RETRACT.search(line)
        if m:
            assert int(m.group(2)) == int(m.group(1)) * (1 + track), (seed, line)
            SEEN["retraction"] += 1
    admitted: set[str] = set()
    for r in records:
        if r["mode"] != "EXTEND":
            continue
        for rid, prefix in zip(r["rids"], r["prefix"], strict=True):
            if rid not in admitted and prefix > 0:
                SEEN["a first prefill on a cached prefix"] += 1
            admitted.add(rid)
    last = records[-1]
    assert last["mamba_available"] + last["mamba_in_tree"] == case.mamba_slots, (seed, last)


@pytest.mark.parametrize("overlap", [False, True], ids=["normal", "overlap"])
def test_sglangs_loop_with_the_mamba_radix_cache(overlap: bool) -> None:
    for seed in range(CASES):
        _check(seed, overlap)


def test_the_cases_exercised_the_cache() -> None:
    if sum(SEEN.values()) == 0:
        pytest.skip("run with the random cases")
    assert SEEN["a first prefill on a cached prefix"] >= CASES // 2, SEEN
    assert SEEN["retraction"] >= 1, SEEN
