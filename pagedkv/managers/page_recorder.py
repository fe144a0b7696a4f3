"""Who owns every page after every step, recorded as changes: the visualizer's page events.

At card scale a pool has thousands of pages and a run tens of thousands of steps, so storing
each step's page table is out of the question. A page changes owner only when it is
allocated, freed, taken into the radix cache, locked, unlocked or evicted, so the changes
are few (about three per page a request ever holds). :class:`PageRecorder` keeps, after each
step, what changed since the step before:

- **owners**: the pages whose owner changed. Owners: a request id (>= 0) for a page only
  that request holds (its own tokens beyond its cached prefix); :data:`FREE`; :data:`CACHED`
  for a page the radix cache holds that no running request uses (evictable); :data:`SHARED`
  for a cached page some running request locks.
- **rows**: the entries of running requests' ``req_to_token`` rows that were set or
  repointed, by page: request ``rid``'s ``index``-th page (its tokens ``index * page_size``
  to ``(index + 1) * page_size - 1``) is now page ``page``.
- **lengths**: each running request's ``kv_committed_len`` (tokens whose KV is in the pool)
  where it is not the obvious one: a decode step adds one token to every running request,
  any other step none; a length is recorded when a request first holds KV, whenever it
  differs from that rule (a prefill chunk, a re-prefill), and as 0 when its row is freed
  (finish, abort, retraction).

Replaying the three lists from step 0 rebuilds, at any step, every page's owner and every
running request's row and token count exactly (``tests/managers/test_page_recorder.py``).

In the overlap loop (SGLang's default) the in-flight batch's requests are holders too (its
prefill's requests hold KV a step before they join the running batch), and the record keeps
what that loop leaves half done after each step: the slots allocated ahead and the requests
finished but not yet seen (:mod:`pagedkv.managers.in_flight_recorder`).

Cost: most steps only append a page to a few rows; those are recorded from the batch's
arrays. A step that admits, finishes, retracts, evicts or changes the tree is recorded by
recomputing every page's owner (:func:`page_owners`) and every row, and comparing.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from pagedkv.managers.in_flight_recorder import InFlightRecorder, InFlightView, joining_requests
from pagedkv.managers.req import Req
from pagedkv.managers.schedule_batch import ScheduleBatch
from pagedkv.managers.trace import Trace
from pagedkv.mem_cache.allocator import BaseTokenToKVPoolAllocator
from pagedkv.mem_cache.chunk_cache import ChunkCache
from pagedkv.mem_cache.memory_pool import ReqToTokenPool
from pagedkv.mem_cache.radix_cache import RadixCache

FREE, CACHED, SHARED = -1, -2, -3


class SchedulerView(Protocol):
    """What the recorder reads of a :class:`~pagedkv.managers.scheduler.Scheduler` after a
    step (the scheduler has these attributes; declared here so that this module does not
    import the scheduler, which builds the recorder's trace)."""

    num_steps: int
    overlap: bool
    in_flight: InFlightView | None
    page_size: int
    max_total_num_tokens: int
    req_to_token_pool: ReqToTokenPool
    allocator: BaseTokenToKVPoolAllocator
    tree_cache: RadixCache | ChunkCache
    running: ScheduleBatch
    chunked_req: Req | None
    trace: Trace  # page events are kept by a Trace only (its events are counted)


class PageRecorder:
    """Page-owner, row and length changes of one run, as int columns.

    Args:
        num_pages: pages in the pool (page ids 1 .. num_pages; page 0 is never used).

    Attributes:
        step, page, owner: ``list[int]`` of equal length, one entry per owner change.
        rows: ``{"step", "rid", "index", "page"}``, ``list[int]`` each: row entries set.
        lengths: ``{"step", "rid", "tokens"}``, ``list[int]`` each: token counts recorded.
        in_flight: the overlap loop's slots allocated ahead and requests finished but not
            yet seen (:class:`~pagedkv.managers.in_flight_recorder.InFlightRecorder`).
    """

    def __init__(self, num_pages: int) -> None:
        self._prev = np.full(num_pages + 1, FREE, dtype=np.int64)
        self.step: list[int] = []
        self.page: list[int] = []
        self.owner: list[int] = []
        self.rows: dict[str, list[int]] = {"step": [], "rid": [], "index": [], "page": []}
        self.lengths: dict[str, list[int]] = {"step": [], "rid": [], "tokens": []}
        self._row: dict[int, list[int]] = {}  # rid -> its row as recorded (page ids)
        self._len: dict[int, int] = {}  # rid -> its token count as recorded
        self._mark: tuple[int, ...] = ()  # what a quiet step leaves unchanged (see _marks)
        self.in_flight = InFlightRecorder()

    def observe(self, step: int, owners: np.ndarray) -> None:
        """Record the pages whose owner (int64 ``[num_pages + 1]``) changed since last time."""
        changed = np.flatnonzero(owners != self._prev)
        if len(changed):
            self.step.extend([step] * len(changed))
            self.page.extend(changed.tolist())
            self.owner.extend(owners[changed].tolist())
            self._prev = owners.copy()

    def record(self, sched: SchedulerView, kind: str) -> None:
        """Record what step ``sched.num_steps`` (a ``prefill``, ``decode`` or ``idle`` step of
        a :class:`~pagedkv.managers.scheduler.Scheduler`, just run) changed."""
        step, p = sched.num_steps, sched.page_size
        table = sched.req_to_token_pool.req_to_token.numpy()
        rids, idx, kv = _holders(sched)
        grow = 1 if kind == "decode" else 0
        mark = _marks(sched)
        quiet = (mark[:-1] == self._mark[:-1] and set(rids) == set(self._len)
                 and all(self._len[r] + grow == n for r, n in zip(rids, kv, strict=True)))
        if quiet:
            appended = self._append_pages(step, p, table, rids, idx, kv)
            # nothing but appends: the free list shrank by exactly the appended pages
            quiet = mark[-1] == self._mark[-1] - appended * p
            if quiet:
                for r, n in zip(rids, kv, strict=True):
                    self._len[r] = n
        if not quiet:
            self._compare_rows(step, p, table, rids, idx, kv, grow)
            self.observe(step, page_owners(sched))
        self._mark = mark
        self.in_flight.record(sched, kind, rids)

    def record_quiet_decodes(self, sched: SchedulerView, step: int, steps: int) -> None:
        """Record decode steps ``step .. step + steps - 1`` of a fast-forward window, run
        at once (``ScheduleBatch.decode_many``) and already in ``sched``'s state.

        The window guarantees each is what :meth:`record` calls quiet (no event, no change
        to the tree or the holders, nothing freed: rows only grow by one token a step), so
        the record is the one ``steps`` calls of :meth:`record` would make: each new page,
        at the step whose token opens it (position ``t`` with ``t % page_size == 0``), in
        the holders' order within a step; the arithmetic is done for all steps at once.
        """
        if steps <= 0:
            return
        p = sched.page_size
        table = sched.req_to_token_pool.req_to_token.numpy()
        rids, idx, kv = _holders(sched)
        start = np.asarray(kv, dtype=np.int64) - steps  # tokens before the first step
        first = -(-start // p) * p  # the first page-opening position at or after start
        count = np.maximum(0, -(-(start + steps - first) // p))  # pages opened per holder
        order = np.repeat(np.arange(len(rids)), count)
        nth = np.arange(len(order)) - np.repeat(np.cumsum(count) - count, count)
        pos = first[order] + nth * p  # the opening positions, holder by holder
        steps_at = step + pos - start[order]
        sort = np.lexsort((order, steps_at))  # by step, then the holders' order
        order, pos, steps_at = order[sort], pos[sort], steps_at[sort]
        pages = table[np.asarray(idx, dtype=np.int64)[order], pos] // p
        owner = np.asarray(rids, dtype=np.int64)[order]
        for r, m, page in zip(owner.tolist(), (pos // p).tolist(), pages.tolist(), strict=True):
            row = self._row[r]
            if m != len(row):
                raise AssertionError(f"request {r}'s row holds {len(row)} pages, not {m}: "
                                     "the window was not quiet")
            row.append(page)
        for name, v in zip(("step", "rid", "index", "page"), (steps_at, owner, pos // p, pages),
                           strict=True):
            self.rows[name].extend(v.tolist())
        changed = self._prev[pages] != owner  # pages are distinct: no order between them
        self.step.extend(steps_at[changed].tolist())
        self.page.extend(pages[changed].tolist())
        self.owner.extend(owner[changed].tolist())
        self._prev[pages] = owner
        self._len.update(zip(rids, kv, strict=True))
        self._mark = _marks(sched)

    def _append_pages(self, step: int, p: int, table: np.ndarray, rids: list[int],
                      idx: list[int], kv: list[int]) -> int:
        """A quiet step: record each row's new last pages as its own; return how many."""
        appended = 0
        for r, i, n in zip(rids, idx, kv, strict=True):
            row = self._row[r]
            have, need = len(row), -(-n // p)
            if need <= have:
                continue
            pages = (table[i, have * p:need * p:p] // p).tolist()
            for k, page in enumerate(pages, start=have):
                self._set_row(step, r, k, page, row)
                if self._prev[page] != r:
                    self._prev[page] = r
                    self.step.append(step)
                    self.page.append(page)
                    self.owner.append(r)
            appended += len(pages)
        return appended

    def _compare_rows(self, step: int, p: int, table: np.ndarray, rids: list[int],
                      idx: list[int], kv: list[int], grow: int) -> None:
        """Any other step: compare every row and length with the record."""
        holding = set(rids)
        for r in [r for r in self._len if r not in holding]:
            self._set_len(step, r, 0)
            del self._len[r], self._row[r]
        for r, i, n in zip(rids, idx, kv, strict=True):
            before = self._len.get(r)
            if before is None or before + grow != n:
                self._set_len(step, r, n)
            self._len[r] = n
            row = self._row.setdefault(r, [])
            now = (table[i, :-(-n // p) * p:p] // p).tolist()
            if row == now:
                continue
            same = min(len(row), len(now))  # most rows only grew: skip their common head
            for k in range(same if row[:same] == now[:same] else 0, len(now)):
                if k >= len(row) or row[k] != now[k]:
                    self._set_row(step, r, k, now[k], row)
            del row[len(now):]

    def _set_row(self, step: int, rid: int, k: int, page: int, row: list[int]) -> None:
        for name, v in zip(("step", "rid", "index", "page"), (step, rid, k, page), strict=True):
            self.rows[name].append(v)
        if k < len(row):
            row[k] = page
        else:
            row.append(page)

    def _set_len(self, step: int, rid: int, tokens: int) -> None:
        for name, v in zip(("step", "rid", "tokens"), (step, rid, tokens), strict=True):
            self.lengths[name].append(v)

    def to_dict(self) -> dict[str, Any]:
        """``{"step", "page", "owner", "rows": {...}, "lengths": {...}, "ahead": {...},
        "unseen": {...}, "overlap"}``, lists of ints (``overlap`` a bool)."""
        return {"step": list(self.step), "page": list(self.page), "owner": list(self.owner),
                "rows": {k: list(v) for k, v in self.rows.items()},
                "lengths": {k: list(v) for k, v in self.lengths.items()},
                **self.in_flight.to_dict()}


def _holders(sched: SchedulerView) -> tuple[list[int], list[int], list[int]]:
    """Requests holding a row now: ``(rids, req_to_token rows, kv_committed_len)``, the
    running batch's live requests, the chunked request, then (overlap loop) the in-flight
    prefill's requests that have not joined the running batch yet."""
    b = sched.running
    live = (~b.finished).tolist()
    rids = [r.rid for r, on in zip(b.reqs, live, strict=True) if on]
    idx = b.req_pool_idx[~b.finished].tolist()
    kv = b.kv_len[~b.finished].tolist()
    c = sched.chunked_req
    for r in ([] if c is None else [c]) + joining_requests(sched):
        rids.append(r.rid)
        idx.append(r.req_pool_idx)
        kv.append(r.kv_committed_len)
    return rids, idx, kv


def _marks(sched: SchedulerView) -> tuple[int, ...]:
    """What changes when anything but row growth happens: events so far, the tree's sizes
    and node count, the chunked request; last, the free slots (checked separately)."""
    tree = sched.tree_cache
    chunked = -1 if sched.chunked_req is None else sched.chunked_req.rid
    nodes = getattr(tree, "num_nodes", 0)
    return (len(sched.trace.events), tree.evictable_size(), tree.protected_size(), nodes,
            chunked, sched.allocator.available_size())


def page_owners(sched: SchedulerView) -> np.ndarray:
    """Every page's owner now (int64 ``[num_pages + 1]``) from a scheduler's state.

    Requests' own pages are the pages of their row from ``cache_protected_len`` (a whole
    page boundary) to ``kv_committed_len``; the tree's pages are its nodes' slots.
    """
    p = sched.page_size
    owners = np.full(sched.max_total_num_tokens // p + 1, FREE, dtype=np.int64)
    table = sched.req_to_token_pool.req_to_token.numpy()
    b = sched.running
    holders = [r for r, done in zip(b.reqs, b.finished.tolist(), strict=True) if not done]
    b.sync()
    if sched.chunked_req is not None:
        holders.append(sched.chunked_req)
    holders += joining_requests(sched)
    for r in holders:
        own = table[r.req_pool_idx, r.cache_protected_len:r.kv_committed_len:p]
        owners[own // p] = r.rid
    tree = sched.tree_cache
    if not tree.disable:
        for node in tree.nodes():
            if node is not tree.root_node:
                owners[node.value[::p] // p] = SHARED if node.lock_ref else CACHED
    return owners
