"""Request-life cases: requests with token ids (shared system prompts, multi-turn prompts that
repeat an earlier prompt and its answer) go through prefill passes (whole or chunked), decode
steps, finishes and retractions on SGLang (:class:`life_sglang.SglangLife`) and on pagedkv
(:class:`life_pagedkv.PagedkvLife`), and every step's state is compared: each live request's
``req_to_token`` row and tree-protected length, what each admission matched and computed, who
finished, the tree's evictable/protected sizes, the free-slot count and the whole free list.

The executor (:func:`run`) keeps the scheduler's bookkeeping (who waits, runs, is chunked or
done, the running batch's order) for both sides, and processes pass results the way both
releases do: in batch order, a middle chunk skips its token, a finished request releases its
KV into the tree, the others are cached (``cache_unfinished_req`` / ``checkpoint_kv_cache``);
0.5.23 holds the prefill result's frees in one free group, both releases the decode result's.
Steps:

- ``("prefill", [(rid, limit), ...], resume_limit)``: one pass; a carried chunked request
  continues first (at most ``resume_limit`` tokens, any length), then the named requests that
  are waiting, each cut to ``limit`` tokens (whole pages) if given and no chunk is carried;
- ``("decode",)``: one decode step of the running batch;
- ``("retract", k)``: ``release_req`` of the ``k``-th running request (mod the batch size).

A step that runs out of memory ends the case (SGLang raises there).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _pass_result(side: Any, rids: list[str], middle: set[str], prefill: bool, group: bool) -> list[str]:
    """Process one pass's results in batch order; return the requests that finished. After
    a prefill pass the unfinished requests are cached, after a decode step they are not."""
    done = []
    if group:
        side.group(True)
    for rid in rids:
        if rid in middle:
            side.middle_chunk_done(rid)
        elif side.sample(rid):
            side.release(rid, insert=True)
            done.append(rid)
        elif prefill:
            side.cache_unfinished(rid)
    if group:
        side.group(False)
    return done


def build_state(case: dict, side: Any) -> None:
    """The memory state of an admission or retraction case, on ``side``: the ``cached``
    requests prefilled and finished (their sequences stay in the tree, evictable), the
    ``running`` ones prefilled and grown by ``grown[rid]`` more tokens, the ``chunked`` one
    (rid, first chunk) through its first chunk."""
    # one request per pass, so that each finds the ones before it cached and the pool never
    # holds two copies of a shared prefix (what fits at the end fits all along)
    for group in ("cached", "running"):
        for rid in case[group]:
            side.admit(rid, None)
            assert side.extend([rid]), f"the pool cannot hold {group} request {rid}"
            _pass_result(side, [rid], set(), True, group=case["version"] != "0.5.9")
    for rid in case["running"]:
        side.grow(rid, case["grown"][rid])
    if case["chunked"]:
        rid, first = case["chunked"]
        side.admit(rid, first)
        assert side.extend([rid]), "the pool cannot hold the chunked request"
        _pass_result(side, [rid], {rid}, True, group=case["version"] != "0.5.9")


def setup(case: dict, side_class: type, *args: Any) -> Any:
    """A side sized for ``case``, its requests added (``case["requests"]``: rid ->
    ``(prompt, max_new_tokens, planned outputs[, ignore_eos, generated])``)."""
    reqs = case["requests"]
    longest = max(len(spec[0]) + spec[1] for spec in reqs.values())
    side = side_class(case["page_size"], case["pool_tokens"], len(reqs) + 1,
                      longest + case["page_size"], *args)
    for rid, spec in reqs.items():
        side.add(rid, *spec)
    return side


def run(case: dict, side: Any) -> list[dict]:
    """Execute ``case`` on ``side`` (from :func:`setup`); one record per step."""
    old = case["version"] == "0.5.9"
    status = dict.fromkeys(case["requests"], "waiting")
    running: list[str] = []
    chunked: str | None = None
    records = []
    for step in case["steps"]:
        kind, info, done = step[0], [], []
        if kind == "prefill":
            batch, middle = [], set()
            carried = chunked
            if chunked is not None:
                info.append((chunked, *side.resume(chunked, step[2])))
                batch.append(chunked)
            for rid, limit in step[1]:
                if status[rid] != "waiting":
                    continue
                status[rid] = "admitted"
                info.append((rid, *side.admit(rid, None if carried or chunked else limit)))
                batch.append(rid)
                if info[-1][3]:
                    chunked = rid
            middle = {rid for rid, _, _, cut in info if cut}
            if chunked not in middle:
                chunked = None
            if batch and not side.extend(batch):
                records.append({"step": step, "oom": True})
                break
            done = _pass_result(side, batch, middle, True, group=not old) if batch else []
            running += [r for r in batch if r not in middle and r not in done]
        elif kind == "decode" and running:
            if not side.decode(running):
                records.append({"step": step, "oom": True})
                break
            done = _pass_result(side, running, set(), False, group=True)
            running = [r for r in running if r not in done]
        elif kind == "retract" and running:
            rid = running.pop(step[1] % len(running))
            side.retract(rid, len(running))
            status[rid] = "waiting"
            info.append(rid)
        for rid in done:
            status[rid] = "done"
        rows = {rid: side.row(rid) for rid in case["requests"]}
        records.append({
            "step": step, "info": info, "done": done,
            "rows": {rid: row for rid, row in rows.items() if row is not None},
            "protected": {rid: side.protected_len(rid) for rid in rows if rows[rid] is not None},
            "sizes": side.sizes(), "free": side.free_list(),
        })
    return records


def random_case(seed: int, version: str) -> dict:
    """A seeded case: page size 1, 4 or 16; the radix cache on (mostly) or off; 3..8 requests,
    some sharing a system prompt, some continuing an earlier request's prompt and answer, some
    repeating an earlier prompt whole; a pool from tight to roomy; 8..20 steps."""
    rng = np.random.default_rng(seed)
    p = int(rng.choice((1, 4, 16)))
    system = rng.integers(1, 1000, int(rng.integers(0, 3 * p + 2))).tolist()
    reqs: dict[str, tuple[list[int], int, list[int]]] = {}
    for i in range(int(rng.integers(3, 9))):
        roll = rng.random()
        alphabet = 4 if rng.random() < 0.3 else 1000
        tail = rng.integers(1, alphabet + 1, int(rng.integers(1, 4 * p + 3))).tolist()
        if reqs and roll < 0.3:  # the next turn of an earlier conversation
            prompt, _, outputs = reqs[str(rng.choice(sorted(reqs)))]
            head = prompt + outputs[:int(rng.integers(0, len(outputs) + 1))]
        elif reqs and roll < 0.4:  # an earlier prompt again, whole
            head, tail = reqs[str(rng.choice(sorted(reqs)))][0], []
        else:
            head = system if roll < 0.7 else []
        max_new = int(rng.integers(1, 7))
        reqs[f"q{i}"] = (head + tail, max_new, rng.integers(1, alphabet + 1, max_new).tolist())
    demand = sum(-(-(len(pr) + m) // p) for pr, m, _ in reqs.values())
    pages = max(4, int(demand * rng.uniform(0.5, 1.6)) + 2)
    names = sorted(reqs)
    steps: list[tuple[Any, ...]] = []
    for _ in range(int(rng.integers(8, 21))):
        roll = rng.random()
        if roll < 0.4:
            chosen = rng.permutation(names)[:int(rng.integers(1, 4))].tolist()
            limits = [int(rng.integers(1, 4)) * p if rng.random() < 0.3 else None for _ in chosen]
            steps.append(("prefill", list(zip(chosen, limits, strict=True)),
                          int(rng.integers(1, 3 * p + 3))))
        elif roll < 0.88:
            steps.append(("decode",))
        else:
            steps.append(("retract", int(rng.integers(0, 8))))
    return {"version": version, "page_size": p, "pool_tokens": pages * p, "requests": reqs,
            "steps": steps, "radix": bool(rng.random() < 0.75)}
