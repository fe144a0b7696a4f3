"""Page events: replaying the owner, row and length changes rebuilds each step exactly."""

from __future__ import annotations

import numpy as np
import pytest

from pagedkv.entrypoints import simulate
from pagedkv.managers import Scheduler, SchedulerConfig
from pagedkv.managers.page_recorder import CACHED, FREE, SHARED, page_owners
from pagedkv.workloads.prefix import as_specs, multi_turn
from pagedkv.workloads.synthetic import uniform


def _rows_now(s: Scheduler) -> dict[int, tuple[int, list[int]]]:
    """Every request holding a row: ``rid -> (kv_committed_len, page ids of its row)``."""
    b, p = s.running, s.page_size
    b.sync()
    reqs = [r for r, f in zip(b.reqs, b.finished.tolist(), strict=True) if not f]
    if s.chunked_req is not None:
        reqs.append(s.chunked_req)
    reqs += _joining(s)
    table = s.req_to_token_pool.req_to_token.numpy()
    return {r.rid: (r.kv_committed_len, (table[r.req_pool_idx, :r.kv_committed_len:p] // p).tolist())
            for r in reqs}


def _joining(s: Scheduler) -> list:
    """The overlap loop: a prefill's requests hold KV before they join the running batch."""
    f = s.in_flight
    if f is None or f.batch.mode != "extend":
        return []
    return [r for r in f.batch.reqs if not r.finished and r is not s.chunked_req
            and all(r is not x for x in s.running.reqs)]


class Replay:
    """What a reader of the record holds: owners, rows and lengths after the last step."""

    def __init__(self, num_pages: int, record) -> None:
        self.owners = np.full(num_pages + 1, FREE)
        self.rows: dict[int, list[int]] = {}
        self.lens: dict[int, int] = {}
        self.rec = record
        self.seen = [0, 0, 0]

    def step(self, step: int, kind: str) -> None:
        """Apply what the record holds for ``step`` (the steps before it applied already)."""
        rec, (o, r, n) = self.rec, self.seen
        for rid in self.lens:  # the rule: a decode step adds a token to every holder
            self.lens[rid] += kind == "decode"
        lengths, rows = rec.lengths, rec.rows
        while n < len(lengths["step"]) and lengths["step"][n] <= step:
            assert lengths["step"][n] == step
            rid, tokens = lengths["rid"][n], lengths["tokens"][n]
            if tokens:
                self.lens[rid] = tokens
            else:
                del self.lens[rid], self.rows[rid]
            n += 1
        while r < len(rows["step"]) and rows["step"][r] <= step:
            assert rows["step"][r] == step
            k = rows["index"][r]
            self.rows.setdefault(rows["rid"][r], [])[k:k + 1] = [rows["page"][r]]
            r += 1
        while o < len(rec.step) and rec.step[o] <= step:
            assert rec.step[o] == step
            self.owners[rec.page[o]] = rec.owner[o]
            o += 1
        self.seen = [o, r, n]

    def table(self, page_size: int) -> dict[int, tuple[int, list[int]]]:
        return {rid: (n, self.rows[rid][:-(-n // page_size)]) for rid, n in self.lens.items()}


@pytest.mark.parametrize(("page", "radix", "version", "overlap"),
                         [(1, True, "0.5.23", False), (4, True, "0.5.23", False),
                          (16, False, "0.5.23", False), (4, True, "0.5.9", False),
                          (1, True, "0.5.23", True), (4, True, "0.5.23", True),
                          (16, False, "0.5.9", True)])
def test_replayed_events_rebuild_each_step(page: int, radix: bool, version: str,
                                           overlap: bool) -> None:
    specs = as_specs(multi_turn(6, 3, (10, 40), (10, 60), system_len=30, seed=2), max_new_tokens=80)
    s = Scheduler(specs, max_total_num_tokens=1024, page_size=page, radix_cache=radix,
                  record_pages=True, fast_forward=False,  # one step at a time, to replay each
                  config=SchedulerConfig(chunked_prefill_size=64, sglang_version=version,
                                         disable_overlap_schedule=not overlap))
    replay = Replay(1024 // page, s.trace.page_events)
    while s.step():
        replay.step(s.num_steps - 1, s.trace.steps["kind"][-1])
        assert np.array_equal(replay.owners, page_owners(s))
        assert replay.table(page) == _rows_now(s)
        # the split the trace columns report, page by page
        owners = replay.owners
        assert int((owners[1:] == FREE).sum()) * page == s.allocator.available_size()
        # every row's tokens, the overlap loop's prefill in flight included (its requests
        # join the running batch at the next step)
        assert sum(n for n, _ in replay.table(page).values()) == s.trace.steps["tokens_used"][-1]
        if radix:
            cached = int(np.isin(owners[1:], (CACHED, SHARED)).sum()) * page
            assert cached == s.tree_cache.evictable_size() + s.tree_cache.protected_size()
    # at the end nothing runs: every page is free or cached and evictable
    owners = replay.owners
    assert np.isin(owners[1:], (FREE, CACHED)).all() and (owners[1:] == CACHED).any() == radix
    assert replay.lens == {} and replay.rows == {}
    d = s.trace.to_dict()["page_events"]
    assert len(d["step"]) == len(d["page"]) == len(d["owner"]) > 0
    assert len(d["rows"]["page"]) >= len(d["lengths"]["tokens"]) > 0


def test_retraction_frees_the_victims_own_pages() -> None:
    """The step before a retraction, the victim's row holds its prompt's whole pages in the
    tree (locked: shared) and the rest as its own; after it, its row is gone and it owns no
    page. A run records the same trace with and without the page record."""
    specs = uniform(24, (8, 20), (30, 90), 90, rate=25.0, seed=0)
    kw = dict(model="llama-3-8b", gpu="h100-sxm-80gb", page_size=4, max_total_tokens=400,
              new_token_ratio_decay_steps=60, disable_overlap_schedule=True)
    plain = simulate(specs, **kw).trace.to_dict()
    result = simulate(specs, record_pages=True, **kw)
    trace = result.trace.to_dict()
    assert trace["steps"] == plain["steps"] and trace["events"] == plain["events"]
    step, _, rid, extra = next(e for e in trace["events"] if e[1] == "retract")
    replay = Replay(100, result.trace.page_events)
    for s, kind in enumerate(trace["steps"]["kind"][:step]):
        replay.step(s, kind)
    n, row = replay.table(4)[rid]
    kept = extra["kept"] // 4
    assert n == extra["freed"] and kept > 0
    assert [int(replay.owners[p]) for p in row] == [SHARED] * kept + [rid] * (len(row) - kept)
    replay.step(step, trace["steps"]["kind"][step])
    assert rid not in replay.lens and rid not in replay.owners
