"""Prefill-budget cases on a sliding-window hybrid: a tree and pools brought to a random state
(inserts, some with a window-released prefix, locks, SWA evictions), then one prefill pass's
offers to SGLang 0.5.23's ``SWAPrefillBudget`` (``mem_cache/prefill_budget.py``, built by the
allocator's own ``create_prefill_budget``) and to pagedkv's
(:mod:`pagedkv.mem_cache.swa_prefill_budget`): ``check_prefill``, ``can_allocate_prefill``,
``available_chunk_tokens``, ``has_capacity`` and ``reserve``, with random extends, output
budgets, chunk limits (or none) and extra tokens. Records every answer and the three
remaining budgets after every call.
"""

from __future__ import annotations

from typing import Any

import drive_swa_tree as T
import numpy as np

from pagedkv.mem_cache.swa_prefill_budget import SWAPrefillBudget


class PagedkvBudget(T.PagedkvSWATree):
    """pagedkv's tree and allocator, and its SWA prefill budget over them."""

    sglang = False

    def budget(self) -> Any:
        return SWAPrefillBudget(self.alloc, self.tree)


def _remaining(b: Any) -> tuple[int, int, int]:
    return int(b.remaining_total), int(b.remaining_current), int(b.remaining_swa)


def run(case: dict, side: Any) -> list[Any]:
    """Bring ``side`` to the case's tree state, then run the budget calls."""
    records: list[Any] = [r["sizes"] for r in T.run({**case, "steps": case["setup"]}, side)]
    b = side.budget()
    for call in case["calls"]:
        kind, out = call[0], None
        if kind == "check":
            _, ext, total, new, chunk = call
            out = b.check_prefill(extend_input_len=ext, total_tokens=total, max_new_tokens=new,
                                  input_tokens=ext, swa_host_hit_length=0, chunk_limit=chunk) \
                if side.sglang else b.check_prefill(extend_input_len=ext, total_tokens=total,
                                                    max_new_tokens=new, chunk_limit=chunk)
            out = (bool(out[0]), out[1])
        elif kind == "can":
            _, paged, ext, new, chunk = call
            out = bool(b.can_allocate_prefill(paged_input=paged, extend_input_len=ext,
                                              max_new_tokens=new, chunk_limit=chunk))
        elif kind == "chunk":
            out = b.available_chunk_tokens(call[1])
        elif kind == "capacity":
            out = bool(b.has_capacity())
        elif kind == "reserve":
            _, ext, new, extra, chunk = call
            b.reserve(ext, new, extra_tokens=extra, chunk_limit=chunk)
        records.append((call, out, _remaining(b)))
    return records


def random_case(seed: int) -> dict:
    """A tree case from :func:`drive_swa_tree.random_case` (its steps as the set-up), then
    4..20 budget calls sized to the pools."""
    case = T.random_case(seed)
    rng = np.random.default_rng(seed + 7_000_000)
    p, swa = case["page_size"], case["swa_tokens"]

    def chunk() -> int | None:
        return None if rng.random() < 0.4 else int(rng.integers(1, swa + 4 * p))

    calls: list[tuple[Any, ...]] = []
    for _ in range(int(rng.integers(4, 21))):
        big = rng.random() < 0.4  # long enough that the SWA pool can never hold it whole
        ext = int(rng.integers(swa // 2, 2 * swa + 3 * p) if big else rng.integers(1, swa // 2 + 2))
        new = int(rng.integers(0, swa // 2 + 1))
        roll = rng.random()
        if roll < 0.35:
            calls.append(("check", ext, (0 if big else ext) + min(new, 4096) + p, new, chunk()))
        elif roll < 0.5:
            calls.append(("can", -(-ext // p) * p, ext, new, chunk()))
        elif roll < 0.6:
            calls.append(("chunk", int(rng.integers(1, swa + 4 * p))))
        elif roll < 0.7:
            calls.append(("capacity",))
        else:
            calls.append(("reserve", ext // 3 + 1, new // 3, int(rng.integers(0, 2)) * p, chunk()))
    return {**case, "setup": case["steps"], "steps": None, "calls": calls}
