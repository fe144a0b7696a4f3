"""Admission cases: one prefill pass of SGLang's ``PrefillAdder`` and of pagedkv's over the
same memory, the same running batch and the same waiting queue.

The state is built on both sides with the request-life drivers (:mod:`life_sglang`,
:mod:`life_pagedkv`), so it is real: finished requests' sequences cached in the tree
(evictable), running requests holding their KV and locking their prompt's path, each with
some output generated, an optional request halfway through its chunks. Then one pass runs as
``get_new_batch_prefill`` runs it: the carried chunk is stashed and continued
(``add_chunked_req``), then each waiting request is matched (``init_next_round_input``) and
offered (``add_one_req``) until a result is not CONTINUE (0.5.23 also stops before matching
once the budgets say OTHER).

Recorded: the budgets before the pass and after every offer, exactly (``rem_total_tokens``,
``cur_rem_tokens``, ``rem_input_tokens``, ``rem_chunk_tokens``), each offer's matched prefix,
result, admission and extend length, the admitted list, the new chunked request, the log
counters (``#cached-token``, ``#new-token``), and the tree sizes and free slots after the
pass (the admission locks).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from drive_life import build_state, setup
from life_pagedkv import PagedkvLife

from pagedkv.managers.config import SchedulerConfig
from pagedkv.managers.schedule_batch import ScheduleBatch as PkBatch
from pagedkv.managers.schedule_policy import PrefillAdder as PkAdder


class PagedkvAdder:
    """pagedkv's ``PrefillAdder`` over a :class:`PagedkvLife` state."""

    def __init__(self, case: dict) -> None:
        self.side = setup(case, PagedkvLife, case["version"], case["radix"])
        build_state(case, self.side)
        self.names = {id(r): rid for rid, r in self.side.reqs.items()}
        batch = PkBatch(self.side.pool, self.side.alloc, self.side.tree)
        batch.merge_batch([self.side.reqs[r] for r in case["running"]])
        config = SchedulerConfig(sglang_version=case["version"], chunked_prefill_size=case["chunk"],
                                 max_prefill_tokens=case["max_prefill_tokens"])
        self.adder = PkAdder(config, self.side.tree, self.side.alloc, batch, case["ratio"])

    def budgets(self) -> tuple[float, float, int, int | None]:
        a = self.adder
        return float(a.rem_total_tokens), float(a.cur_rem_tokens), a.rem_input_tokens, a.rem_chunk_tokens

    def stop_before_matching(self) -> bool:
        return (self.adder.config.sglang_version != "0.5.9"
                and self.adder.budget_state().name == "OTHER")

    def offer(self, rid: str) -> tuple[int, str]:
        prefix = self.side.match(rid)
        return prefix, self.adder.add_one_req(self.side.reqs[rid]).name

    def extend_len(self, rid: str) -> int:
        return self.side.reqs[rid].extend_len

    def outcome(self) -> tuple[list[str], str | None, tuple[int, int]]:
        a = self.adder
        chunked = a.new_chunked_req
        return ([self.names[id(r)] for r in a.can_run_list],
                None if chunked is None else self.names[id(chunked)],
                (a.log_hit_tokens, a.log_input_tokens))


def run(case: dict, adder_class: type) -> dict:
    """One pass over ``case``'s state; the record compared."""
    pass_ = adder_class(case)
    out: dict[str, Any] = {"initial": pass_.budgets(), "offers": []}
    if case["chunked"]:
        rid = case["chunked"][0]
        pass_.side.stash(rid)
        carried = pass_.adder.add_chunked_req(pass_.side.reqs[rid]) is not None
        out["chunked"] = (carried, pass_.extend_len(rid), pass_.budgets())
    for rid in case["waiting"]:
        if pass_.stop_before_matching():
            break
        prefix, result = pass_.offer(rid)
        admitted = rid in pass_.outcome()[0]
        out["offers"].append((rid, prefix, result, pass_.extend_len(rid) if admitted else None,
                              pass_.budgets()))
        if result != "CONTINUE":
            break
    out["admitted"], out["new_chunked"], out["log"] = pass_.outcome()
    out["sizes"] = pass_.side.sizes()
    return out


def make_case(version: str, p: int, pool_pages: int, requests: dict, *, radix: bool = False,
              ratio: float = 0.7, chunk: int | None = None, max_prefill: int = 16384,
              cached: tuple = (), running: tuple = (), grown: dict | None = None,
              chunked: tuple | None = None, waiting: tuple = ()) -> dict:
    """A pass over a state built from ``requests`` (see :func:`request`): page size ``p``, a
    pool of ``pool_pages`` pages, the named groups of requests."""
    return {"version": version, "page_size": p, "pool_tokens": pool_pages * p, "radix": radix,
            "ratio": ratio, "chunk": chunk, "max_prefill_tokens": max_prefill, "requests": requests,
            "cached": list(cached), "running": list(running),
            "grown": grown or dict.fromkeys(running, 0), "chunked": chunked, "waiting": list(waiting)}


def request(prompt: int | list[int], max_new: int, first: int = 1, ignore_eos: bool = False,
            generated: int = 0) -> tuple:
    """A request spec: ``prompt`` token ids, or that many ids counting from ``first``."""
    tokens = list(range(first, first + prompt)) if isinstance(prompt, int) else prompt
    return (tokens, max_new, list(range(9000, 9000 + min(max_new, 64))), ignore_eos, generated)


def random_case(seed: int, version: str) -> dict:
    """A seeded pass: page size 1, 4 or 16, the radix cache on or off, chunked prefill on or
    off (chunk sizes not always whole pages), ``max_prefill_tokens`` large or tight, a ratio
    with a long fraction, 0..3 cached sequences, 0..6 running requests (some ignoring EOS,
    some with ``max_new_tokens`` above the 4096 clip), maybe a chunked request, 1..5 waiting
    requests (some retracted, holding output but no KV), in a pool from tight to roomy."""
    rng = np.random.default_rng(seed)
    p = int(rng.choice((1, 4, 16)))
    system = rng.integers(1, 1000, int(rng.integers(0, 3 * p + 2))).tolist()
    reqs: dict[str, tuple[list[int], int, list[int], int, bool]] = {}

    def prompt(longest: int) -> list[int]:
        head = system if rng.random() < 0.6 else []
        if reqs and rng.random() < 0.3:
            seen = reqs[str(rng.choice(sorted(reqs)))]
            head = seen[0] + seen[2][:seen[4]]
            if rng.random() < 0.3:  # a prompt (and output) seen before, nothing new
                return head
        return head + rng.integers(1, 1000, int(rng.integers(1, longest))).tolist()

    def add(rid: str, tokens: list[int], max_new: int, generated: int, ignore_eos: bool) -> str:
        reqs[rid] = (tokens, max_new, rng.integers(1, 1000, min(max_new, 64)).tolist(),
                     ignore_eos, generated)
        return rid

    cached = [add(f"c{i}", prompt(4 * p + 3), 1, 0, True) for i in range(int(rng.integers(0, 4)))]
    running, grown = [], {}
    for i in range(int(rng.integers(0, 7))):
        max_new = int(rng.integers(2, 40)) if rng.random() < 0.9 else int(rng.choice((4100, 5000)))
        generated = int(rng.integers(1, min(max_new, 9)))
        running.append(add(f"r{i}", prompt(4 * p + 3), max_new, 0, bool(rng.random() < 0.3)))
        grown[running[-1]] = generated - 1
    chunked = None
    if rng.random() < 0.3:
        rid = add("k", prompt(10 * p + 5) + [1] * (2 * p), int(rng.integers(1, 30)), 0, False)
        chunked = (rid, p * int(rng.integers(1, 3)))
    waiting = []
    for i in range(int(rng.integers(1, 6))):
        max_new = int(rng.integers(1, 60)) if rng.random() < 0.95 else 4097
        generated = int(rng.integers(1, min(max_new, 6))) if rng.random() < 0.2 and max_new > 1 else 0
        waiting.append(add(f"w{i}", prompt(6 * p + 3), max_new, generated, bool(rng.random() < 0.3)))
    ratio = float(rng.choice([0.7, 1.0, rng.uniform(0.098, 1.0),
                              0.7 - int(rng.integers(1, 600)) * (0.7 - 0.098) / 600]))
    held = 2 + sum(-(-(len(reqs[r][0]) + 8) // p) for r in cached + running) + (10 if chunked else 0)
    reserved = sum(min(reqs[r][1] - grown[r] - 1, 4096) for r in running) * ratio
    pages = held + int(reserved / p * rng.uniform(0.5, 1.5)) + int(rng.integers(0, 2 * held + 10))
    chunk = None if rng.random() < 0.4 and not chunked else int(rng.integers(p, 6 * p + 8))
    max_prefill = 16384 if rng.random() < 0.7 else int(rng.integers(p, 8 * p + 2))
    return {"version": version, "page_size": p, "pool_tokens": pages * p, "radix": bool(rng.random() < 0.6),
            "ratio": ratio, "chunk": chunk, "max_prefill_tokens": max_prefill, "requests": reqs,
            "cached": cached, "running": running, "grown": grown, "chunked": chunked, "waiting": waiting}
