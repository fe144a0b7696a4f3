"""Random request lives on a linear-attention hybrid's request table and state slots, run
through either side (:class:`PagedkvSlots` here, ``mamba_sglang.SglangSlots``).

A case is plain data: the pool's rows and state slots, and steps. Each step names requests by
their place among those in a given condition on the side that runs it, so both sides resolve
it the same way as long as they agree (and the records show where they stop agreeing):

- ``("alloc", new, cont, slot_only, order)``: one ``alloc`` call for a batch of ``new`` new
  requests, plus a chunked request continuing (it holds a row and a slot) when ``cont`` is
  not None, plus a request holding only a slot (its row freed, SGLang's early mamba state)
  when ``slot_only`` is not None, in the order ``order`` (a permutation);
- ``("finish", pick)``: a request holding both gives back its slot, then its row (finish or
  retraction: both release through ``free_mamba_cache`` and the row's free);
- ``("free_row", pick)``: a request holding both gives back only its row;
- ``("free_slot", pick)``: a request holding only a slot gives it back.

Recorded after every step: the call's answer (the batch's rows, None when rows run out, or
"no state slot", after which the case ends: SGLang's assertion leaves its pool half-updated,
its rows bound, where pagedkv changes nothing),
each batch request's row and slot, the slots its rows map to, both free lists in order and
both available counts.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from pagedkv.configs.mamba_utils import Mamba2CacheParams, Mamba2StateShape
from pagedkv.errors import OutOfMemoryError
from pagedkv.mem_cache.mamba_pool import HybridReqToTokenPool

SHAPE = dict(intermediate_size=8, n_groups=2, num_heads=2, head_dim=4, state_size=4,
             conv_kernel=4)


@dataclasses.dataclass
class _Req:
    req_pool_idx: int = -1
    mamba_pool_idx: int = -1


class PagedkvSlots:
    """pagedkv's :class:`HybridReqToTokenPool` behind the driver's interface."""

    def __init__(self, rows: int, slots: int, release: str) -> None:
        params = Mamba2CacheParams(Mamba2StateShape.create(tp_world_size=1, **SHAPE), (0, 1))
        self.pool = HybridReqToTokenPool.for_release(rows, 8, release, mamba_size=slots,
                                                     cache_params=params)
        self.reqs: dict[str, _Req] = {}

    def held(self, name: str) -> tuple[int, int]:
        r = self.reqs[name]
        return r.req_pool_idx, r.mamba_pool_idx

    def alloc(self, names: list[str]) -> list[int] | str | None:
        for name in names:
            self.reqs.setdefault(name, _Req())
        try:
            return self.pool.alloc([self.reqs[n] for n in names])
        except OutOfMemoryError:
            return "no state slot"

    def free_slot(self, name: str) -> None:
        self.pool.free_mamba_cache(self.reqs[name])

    def free_row(self, name: str) -> None:
        r = self.reqs[name]
        self.pool.free(r.req_pool_idx)
        r.req_pool_idx = -1

    def state(self) -> dict[str, Any]:
        self.pool.check_invariants()
        return {"rows_free": list(self.pool.free_slots),
                "slots_free": list(self.pool.mamba_allocator.free_slots),
                "available": (self.pool.available_size(),
                              self.pool.mamba_allocator.available_size())}

    def mapping(self, rows: list[int]) -> list[int]:
        return self.pool.get_mamba_indices(rows)


def random_case(seed: int, old: bool) -> dict[str, Any]:
    """A random case; ``old`` (SGLang 0.5.9) keeps rows <= slots, as every 0.5.9 server does
    (its row -> slot map has one entry per slot, so a larger row would index past it)."""
    rng = np.random.default_rng([29, seed])
    slots = int(rng.integers(1, 9))
    rows = int(rng.integers(1, slots + 1 if old else 9))
    steps: list[tuple[Any, ...]] = []
    for _ in range(int(rng.integers(8, 40))):
        kind = str(rng.choice(["alloc", "alloc", "finish", "free_row", "free_slot"]))
        if kind == "alloc":
            new = int(rng.integers(0, 4))
            cont = int(rng.integers(0, 8)) if rng.random() < 0.3 else None
            slot_only = int(rng.integers(0, 8)) if rng.random() < 0.3 else None
            size = new + (cont is not None) + (slot_only is not None)
            steps.append(("alloc", new, cont, slot_only,
                          [int(i) for i in rng.permutation(max(size, 1))]))
        else:
            steps.append((kind, int(rng.integers(0, 8))))
    return {"rows": rows, "slots": slots, "steps": steps}


def run(case: dict[str, Any], side: Any, *args: Any) -> list[Any]:
    """Run ``case`` through ``side`` (a class taking ``rows, slots, *args``); the records."""
    s = side(case["rows"], case["slots"], *args)
    born = 0
    records: list[Any] = [s.state()]
    for step in case["steps"]:
        names = list(s.reqs)
        both = [n for n in names if min(s.held(n)) >= 0]
        slot_only = [n for n in names if s.held(n)[0] < 0 <= s.held(n)[1]]
        kind = step[0]
        if kind == "alloc":
            _, new, cont, only, order = step
            batch = [(f"r{born + i}", "new") for i in range(new)]
            born += new
            if cont is not None and both:
                batch.append((both[cont % len(both)], "chunk"))
            if only is not None and slot_only:
                batch.append((slot_only[only % len(slot_only)], "slot only"))
            if not batch:
                continue
            kinds = [batch[i][1] for i in order if i < len(batch)]
            batch = [batch[i][0] for i in order if i < len(batch)]
            out = s.alloc(batch)
            if out == "no state slot":  # SGLang's pool is half-updated: compare the answer
                records.append({"alloc": out, "batch": len(batch)})
                break
            rec: dict[str, Any] = {"alloc": out, "kinds": kinds,
                                   "held": [s.held(n) for n in batch]}
            if isinstance(out, list):
                rec["mapped"] = s.mapping(out)
            records.append((rec, s.state()))
        else:
            pool = slot_only if kind == "free_slot" else both
            if not pool:
                continue
            name = pool[step[1] % len(pool)]
            if kind in ("finish", "free_slot"):
                s.free_slot(name)
            if kind in ("finish", "free_row"):
                s.free_row(name)
            records.append(((kind, name, s.held(name)), s.state()))
    return records
