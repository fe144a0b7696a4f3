"""Page events: replaying the owner, row and length changes rebuilds each step exactly, on
one pool and on a sliding-window hybrid's two (whose SWA pages are checked against both
allocators and the tree after every step)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pagedkv.entrypoints import simulate
from pagedkv.managers import Scheduler, SchedulerConfig
from pagedkv.managers.page_owners import OwnerLog, swa_page_owners, tree_swa_pages
from pagedkv.managers.page_recorder import CACHED, FREE, SHARED, page_owners
from pagedkv.managers.scheduler_init import SlidingWindowPools
from pagedkv.mem_cache.allocator.swa import SWATokenToKVPoolAllocator
from pagedkv.mem_cache.swa_cache import SWAPrefixCache
from pagedkv.workloads.prefix import as_specs, multi_turn
from pagedkv.workloads.synthetic import RequestSpec, uniform


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

    def __init__(self, num_pages: int, record, num_swa_pages: int | None = None) -> None:
        self.owners = np.full(num_pages + 1, FREE)
        self.rows: dict[int, list[int]] = {}
        self.lens: dict[int, int] = {}
        self.rec = record
        self.seen = [0, 0, 0]
        self.swa = None if num_swa_pages is None else np.full(num_swa_pages + 1, FREE)
        self.swa_seen = 0

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
        o = _apply(rec.full, o, step, self.owners)
        self.seen = [o, r, n]
        if self.swa is not None:
            self.swa_seen = _apply(rec.swa, self.swa_seen, step, self.swa)

    def table(self, page_size: int) -> dict[int, tuple[int, list[int]]]:
        return {rid: (n, self.rows[rid][:-(-n // page_size)]) for rid, n in self.lens.items()}


def _apply(log: OwnerLog, at: int, step: int, owners: np.ndarray) -> int:
    """Apply ``log``'s changes of ``step`` from entry ``at`` on; return where it stopped."""
    while at < len(log.step) and log.step[at] <= step:
        assert log.step[at] == step
        owners[log.page[at]] = log.owner[at]
        at += 1
    return at


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


def _check_swa_step(s: Scheduler, replay: Replay) -> None:
    """After a step of a sliding-window hybrid: the replayed owners of both pools are the
    scheduler's, and they account for both allocators and the tree page by page."""
    alloc, tree, p = s.allocator, s.tree_cache, s.page_size
    assert isinstance(alloc, SWATokenToKVPoolAllocator) and isinstance(tree, SWAPrefixCache)
    full = page_owners(s)
    mapping = alloc.full_to_swa_index_mapping.numpy()
    assert np.array_equal(replay.owners, full)
    swa_now = swa_page_owners(full, mapping, tree_swa_pages(tree, p), p, len(replay.swa) - 1)
    assert np.array_equal(replay.swa, swa_now)
    assert replay.table(p) == _rows_now(s)
    swa = replay.swa
    # the free pages are each allocator's free pages
    assert int((full[1:] == FREE).sum()) * p == alloc.full_available_size()
    assert int((swa[1:] == FREE).sum()) * p == alloc.swa_available_size()
    # an SWA page is held exactly when some full slot maps to it
    mapped = np.unique(mapping[:-1][mapping[:-1] > 0] // p)
    assert np.array_equal(np.flatnonzero(swa != FREE), mapped)
    # a request's SWA page is the peer of one of its own full pages
    peers = mapping[:len(full) * p:p]
    mine = (peers > 0) & (full >= 0)
    assert np.array_equal(swa[peers[mine] // p], full[mine])
    assert int((swa >= 0).sum()) == int(mine.sum())
    # the tree's pages, pool by pool
    assert int(np.isin(full, (CACHED, SHARED)).sum()) * p == tree.total_size()
    assert int((swa == SHARED).sum()) * p == tree.swa_protected_size()
    assert int((swa == CACHED).sum()) * p == tree.swa_evictable_size()
    s.check_invariants()


@st.composite
def swa_runs(draw: st.DrawFn) -> tuple:
    """A sliding-window hybrid's small run: page size, window, pools, loop, cache, interval."""
    page = draw(st.sampled_from([1, 4, 16]))
    window = draw(st.sampled_from([4, 8, 32]))
    seed = draw(st.integers(0, 2**16))
    specs = as_specs(multi_turn(draw(st.integers(1, 5)), 2, (4, 40), (4, 60), system_len=20,
                                seed=seed), max_new_tokens=70)
    longest = max(x.prompt_len + x.max_new_tokens for x in specs)
    full = -(-(longest + 8 * page) // page) * page + draw(st.integers(0, 16)) * page
    swa = max(full // 2 // page * page, -(-(longest + 4 * page) // page) * page)
    cfg = SchedulerConfig(chunked_prefill_size=draw(st.sampled_from([None, 16, 64])),
                          swa_eviction_interval=draw(st.sampled_from([1, 4, 128])),
                          disable_overlap_schedule=draw(st.booleans()))
    return specs, page, full, SlidingWindowPools(window, swa), cfg, draw(st.booleans())


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(swa_runs())
def test_swa_hybrid_events_rebuild_both_pools_each_step(case: tuple) -> None:
    specs, page, full, swa, cfg, radix = case
    s = Scheduler(specs, max_total_num_tokens=full, page_size=page, config=cfg,
                  radix_cache=radix, swa=swa, record_pages=True)
    rec = s.trace.page_events
    replay = Replay(full // page, rec, swa.max_total_num_tokens_swa // page)
    steps = 0
    while s.step():
        replay.step(s.num_steps - 1, s.trace.steps["kind"][-1])
        _check_swa_step(s, replay)
        steps += 1
        assert steps < 20_000, "no progress"
    assert np.isin(replay.swa[1:], (FREE, CACHED)).all() and replay.lens == {}
    d = rec.to_dict()
    assert len(d["swa"]["step"]) == len(d["swa"]["page"]) == len(d["swa"]["owner"]) > 0


def test_the_swa_pool_frees_as_the_window_slides_while_the_full_pool_grows() -> None:
    """One request decoding 100 tokens with a window of 8 (released every decode step, page
    size 4): its full pages only grow, while its SWA pages go back to the free list one by
    one, so it never holds more than the window's pages there."""
    s = Scheduler([RequestSpec(20, 100, 100, 0.0)], max_total_num_tokens=256, page_size=4,
                  config=SchedulerConfig(swa_eviction_interval=1, chunked_prefill_size=None),
                  swa=SlidingWindowPools(8, 64), record_pages=True)
    rec = s.trace.page_events
    replay = Replay(64, rec, 16)
    held_swa, kv = [], 0
    while s.step():
        replay.step(s.num_steps - 1, s.trace.steps["kind"][-1])
        _check_swa_step(s, replay)
        if s.reqs[0].finished:
            break
        # every token's full page stays: the prompt's in the tree (locked), the rest its own
        kv = s.reqs[0].kv_committed_len
        assert int((replay.owners == 0).sum() + (replay.owners == SHARED).sum()) == -(-kv // 4)
        held_swa.append(int((replay.swa == 0).sum()))
    assert kv == 119 and max(held_swa) == 5
    # in the SWA pool only the window stays: 8 tokens, the page being written and one page
    # the next release frees
    assert max(held_swa[30:]) == 4
    freed = [st for st, o in zip(rec.swa.step, rec.swa.owner, strict=True) if o == FREE]
    assert len(freed) >= 20 and len(set(freed)) >= 20  # the window frees on many steps
