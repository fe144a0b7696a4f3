"""Decode-memory cases: ``check_decode_mem`` and, when it fails, ``retract_decode`` on SGLang's
``ScheduleBatch`` (:mod:`retract_sglang`) and on pagedkv's, over the same running batch.

The state is built with the request-life drivers (:func:`drive_life.build_state`): cached
sequences in the tree (evictable), running requests holding their KV (their prompts' whole
pages in the tree, locked), grown by a few decode steps each, in a pool with little or no room
left, the radix cache on or off. Then, as ``update_running_batch`` does: the memory check
(which evicts from the tree first) and, if it fails, the retraction.

Recorded: the slots the next step needs, the check's answer, the victims in the order they
were popped (the order the scheduler re-queues them), the aborted request (0.5.23) or the
error (0.5.9) when even one request cannot decode, the new ``new_token_ratio`` exactly, the
kept batch in its new order, ``#new_tokens_gained``, the tree sizes, the free slots, the
whole free list and the kept requests' rows afterwards.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from drive_life import build_state, setup
from life_pagedkv import PagedkvLife

from pagedkv.errors import OutOfMemoryError
from pagedkv.managers.schedule_batch import ScheduleBatch as PkBatch
from pagedkv.releases import RELEASES


class PagedkvRetract:
    """pagedkv's running ``ScheduleBatch`` over a :class:`PagedkvLife` state."""

    def __init__(self, case: dict) -> None:
        self.version = case["version"]
        self.side = setup(case, PagedkvLife, self.version, case["radix"])
        build_state(case, self.side)
        self.names = {id(r): rid for rid, r in self.side.reqs.items()}
        self.batch = PkBatch(self.side.pool, self.side.alloc, self.side.tree)
        self.batch.merge_batch([self.side.reqs[r] for r in case["running"]])

    def need(self) -> int:
        return self.batch.new_tokens_required_next_decode()

    def check(self) -> bool:
        return self.batch.check_decode_mem()

    def retract(self) -> tuple[list[str], float | None, list[str], bool]:
        """(victims, new ratio, aborted, raised)."""
        try:
            victims, ratio, aborted = self.batch.retract_decode(
                20, abort_last_request=RELEASES[self.version].abort_last_request)
        except OutOfMemoryError:
            return [], None, [], True
        return ([self.names[id(r)] for r in victims], ratio,
                [self.names[id(r)] for r in aborted], False)

    def kept(self) -> list[str]:
        return [self.names[id(r)] for r in self.batch.reqs]


def run(case: dict, batch_class: type) -> dict:
    """The memory check and, if it fails, the retraction; the record compared."""
    b = batch_class(case)
    out: dict[str, Any] = {"need": b.need(), "fits": b.check()}
    before = b.side.sizes()[2]
    if not out["fits"]:
        victims, ratio, aborted, raised = b.retract()
        out.update(retracted=victims, ratio=ratio, aborted=aborted, raised=raised,
                   gained=b.side.sizes()[2] - before)
    kept = b.kept()
    out["kept"] = kept
    out["rows"] = {rid: b.side.row(rid) for rid in kept}
    out["sizes"], out["free"] = b.side.sizes(), b.side.free_list()
    return out


def batch_case(version: str, p: int, running: list[tuple[int, int, int]], spare_pages: int = 0,
               radix: bool = False, cached: tuple[int, ...] = ()) -> dict:
    """Running requests ``(prompt_len, max_new_tokens, generated)`` with distinct token ids,
    cached sequences of the given lengths, and a pool that holds exactly their pages plus
    ``spare_pages`` (shared nothing, so the count is exact)."""
    reqs, grown = {}, {}
    for i, n in enumerate(cached):
        reqs[f"c{i}"] = (list(range(10_000 * (i + 1), 10_000 * (i + 1) + n)), 1, [7], True, 0)
    for i, (prompt, max_new, generated) in enumerate(running):
        reqs[f"r{i}"] = (list(range(1000 * (i + 1), 1000 * (i + 1) + prompt)), max_new,
                         list(range(500, 500 + max_new)), True, 0)
        grown[f"r{i}"] = generated - 1
    pages = sum(-(-(prompt + generated - 1) // p) for prompt, _, generated in running)
    pages += sum(n // p for n in cached) if radix else 0
    return {"version": version, "page_size": p, "pool_tokens": (pages + spare_pages) * p,
            "radix": radix, "requests": reqs, "cached": [f"c{i}" for i in range(len(cached))],
            "running": [f"r{i}" for i in range(len(running))], "grown": grown, "chunked": None}


def random_case(seed: int, version: str) -> dict:
    """A seeded batch: page size 1, 4 or 16, the radix cache on or off, 1..8 running requests
    whose (output length, prompt length) often tie, 0..3 cached sequences, and a pool that
    leaves 0..2 pages free besides them."""
    rng = np.random.default_rng(seed)
    p = int(rng.choice((1, 4, 16)))
    system = rng.integers(1, 1000, int(rng.integers(0, 3 * p + 2))).tolist()
    lengths = rng.integers(1, 3 * p + 3, 3).tolist()  # few distinct lengths: ties
    reqs: dict[str, tuple[Any, ...]] = {}

    def prompt(shared: float) -> list[int]:
        head = system if rng.random() < shared else []
        return head + rng.integers(1, 1000, int(rng.choice(lengths))).tolist()

    cached, running, grown = [], [], {}
    for i in range(int(rng.integers(0, 4))):
        tokens = prompt(0.5)
        reqs[f"c{i}"] = (tokens, 1, [7], True, 0)
        cached.append(f"c{i}")
    for i in range(int(rng.integers(1, 9))):
        tokens = prompt(0.6)
        max_new = int(rng.choice((8, 12, int(rng.integers(2, 40)))))
        grow = int(rng.integers(0, min(max_new - 1, 5)))
        if p > 1 and rng.random() < 0.5:  # its next token starts a page
            grow += -(len(tokens) + grow) % p
        max_new = max(max_new, grow + 2)
        reqs[f"r{i}"] = (tokens, max_new, rng.integers(1, 1000, max_new).tolist(), True, 0)
        running.append(f"r{i}")
        grown[f"r{i}"] = grow
    held = sum(-(-(len(reqs[r][0]) + grown.get(r, 0) + 1) // p) for r in cached + running)
    case = {"version": version, "page_size": p, "pool_tokens": (held + 2) * p,
            "radix": bool(rng.random() < 0.7), "requests": reqs, "cached": cached,
            "running": running, "grown": grown, "chunked": None}
    # size the pool to what the batch really holds (shared prefixes are held once), as
    # measured on a roomy pool, give or take a few pages: the cached sequences may have to
    # be evicted, and the next step may not fit
    probe = setup(case, PagedkvLife, version, case["radix"])
    build_state(case, probe)
    evictable, _, available = probe.sizes()
    used = held + 2 - available // p
    largest = max(-(-(len(reqs[r][0]) + grown.get(r, 0)) // p) for r in cached + running)
    pages = used + int(rng.integers(0, 3)) - int(rng.integers(0, evictable // p + 1))
    case["pool_tokens"] = max(pages, largest) * p
    return case
