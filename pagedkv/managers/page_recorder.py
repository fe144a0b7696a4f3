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

On a sliding-window hybrid (SGLang 0.5.23's ``SWATokenToKVPoolAllocator``) the owners, rows
and lengths above are the *full* pool's (rows and the tree address tokens by full slots), and
``swa`` adds the SWA pool's owner changes, recomputed after every step from the full pages'
owners and the allocator's full->SWA mapping
(:func:`~pagedkv.managers.page_owners.swa_page_owners`): a page a request's window left goes
back to :data:`FREE` there while its full peer stays the request's.

On a linear-attention hybrid (a request table with state slots) ``state_slots`` adds the
state pool's parts after every step whose counts changed
(:class:`~pagedkv.managers.state_slot_recorder.StateSlotLog`): slots are not pages, so only
their counts are kept.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from pagedkv.managers.in_flight_recorder import InFlightRecorder, InFlightView, joining_requests
from pagedkv.managers.page_owners import (
    CACHED,
    FREE,
    SHARED,
    OwnerLog,
    swa_page_owners,
    tree_pages,
    tree_swa_pages,
)
from pagedkv.managers.req import Req
from pagedkv.managers.schedule_batch import ScheduleBatch
from pagedkv.managers.state_slot_recorder import StateSlotLog, state_slot_counts
from pagedkv.managers.trace import Trace
from pagedkv.mem_cache.allocator import BaseTokenToKVPoolAllocator
from pagedkv.mem_cache.allocator.swa import SWATokenToKVPoolAllocator
from pagedkv.mem_cache.chunk_cache import ChunkCache
from pagedkv.mem_cache.mamba_pool import HybridReqToTokenPool
from pagedkv.mem_cache.memory_pool import ReqToTokenPool
from pagedkv.mem_cache.radix_cache import RadixCache
from pagedkv.mem_cache.swa_cache import SWAPrefixCache

__all__ = ["CACHED", "FREE", "SHARED", "PageRecorder", "SchedulerView", "page_owners"]


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
    allocator: BaseTokenToKVPoolAllocator | SWATokenToKVPoolAllocator
    tree_cache: RadixCache | ChunkCache | SWAPrefixCache
    running: ScheduleBatch
    chunked_req: Req | None
    trace: Trace  # page events are kept by a Trace only (its events are counted)


class PageRecorder:
    """Page-owner, row and length changes of one run, as int columns.

    Args:
        num_pages: pages in the pool (page ids 1 .. num_pages; page 0 is never used); on a
            sliding-window hybrid, the full pool's.
        num_swa_pages: a sliding-window hybrid's SWA pool pages; None: one pool.

    Attributes:
        step, page, owner: ``list[int]`` of equal length, one entry per owner change.
        swa: the SWA pool's owner changes (:class:`~pagedkv.managers.page_owners.OwnerLog`),
            or None (one pool).
        state_slots: a linear-attention hybrid's state slots per step
            (:class:`~pagedkv.managers.state_slot_recorder.StateSlotLog`, made at the first
            step), or None.
        rows: ``{"step", "rid", "index", "page"}``, ``list[int]`` each: row entries set.
        lengths: ``{"step", "rid", "tokens"}``, ``list[int]`` each: token counts recorded.
        in_flight: the overlap loop's slots allocated ahead and requests finished but not
            yet seen (:class:`~pagedkv.managers.in_flight_recorder.InFlightRecorder`).
    """

    def __init__(self, num_pages: int, num_swa_pages: int | None = None) -> None:
        self.full = OwnerLog(num_pages)
        self.step, self.page, self.owner = self.full.step, self.full.page, self.full.owner
        self.swa = None if num_swa_pages is None else OwnerLog(num_swa_pages)
        self.state_slots: StateSlotLog | None = None
        self.rows: dict[str, list[int]] = {"step": [], "rid": [], "index": [], "page": []}
        self.lengths: dict[str, list[int]] = {"step": [], "rid": [], "tokens": []}
        self._row: dict[int, list[int]] = {}  # rid -> its row as recorded (page ids)
        self._len: dict[int, int] = {}  # rid -> its token count as recorded
        self._mark: tuple[int, ...] = ()  # what a quiet step leaves unchanged (see _marks)
        self.in_flight = InFlightRecorder()
        # the tree's SWA pages and owners, kept while the SWA tree's version stays the same
        # (walking every node every step was most of the cost of recording an SWA run)
        self._swa_tree: tuple[object, int, tuple[np.ndarray, np.ndarray]] | None = None

    @property
    def _prev(self) -> np.ndarray:
        """Every (full) page's owner as last recorded."""
        return self.full.prev

    def observe(self, step: int, owners: np.ndarray) -> None:
        """Record the pages whose owner (int64 ``[num_pages + 1]``) changed since last time."""
        self.full.observe(step, owners)

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
        if self.swa is not None:  # after the full pool's: its owners are now exact
            alloc = sched.allocator
            assert isinstance(alloc, SWATokenToKVPoolAllocator)
            self.swa.observe(step, swa_page_owners(
                self.full.prev, alloc.full_to_swa_index_mapping.numpy(),
                self._tree_swa_pages(sched.tree_cache, p), p, len(self.swa.prev) - 1))
        pool = sched.req_to_token_pool
        if isinstance(pool, HybridReqToTokenPool):
            if self.state_slots is None:
                self.state_slots = StateSlotLog(pool.mamba_pool.size)
            b, c = sched.running, sched.chunked_req
            self.state_slots.observe(step, state_slot_counts(
                pool, sched.tree_cache, [*b.reqs, *([] if c is None else [c]),
                                         *joining_requests(sched)]))

    def _tree_swa_pages(self, cache: Any, p: int) -> tuple[np.ndarray, np.ndarray]:
        """:func:`tree_swa_pages`, walked again only when the SWA tree has changed."""
        tree = getattr(cache, "tree", None)  # SWAPrefixCache's SWARadixCache
        version = getattr(tree, "version", None)
        held = self._swa_tree
        if version is not None and held is not None and held[0] is tree and held[1] == version:
            return held[2]
        pages = tree_swa_pages(cache, p)
        self._swa_tree = None if version is None else (tree, version, pages)
        return pages

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
        "unseen": {...}, "overlap"}``, lists of ints (``overlap`` a bool); a sliding-window
        hybrid's also ``"swa": {"step", "page", "owner"}``, the SWA pool's owner changes; a
        linear-attention hybrid's also ``"state_slots"`` (:meth:`StateSlotLog.to_dict`)."""
        return {"step": list(self.step), "page": list(self.page), "owner": list(self.owner),
                "rows": {k: list(v) for k, v in self.rows.items()},
                "lengths": {k: list(v) for k, v in self.lengths.items()},
                **self.in_flight.to_dict(),
                **({} if self.swa is None else {"swa": self.swa.to_dict()}),
                **({} if self.state_slots is None
                   else {"state_slots": self.state_slots.to_dict()})}


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
    and node count, the chunked request; last, the free slots (of the full pool on a
    sliding-window hybrid, whose window releases free SWA slots only; checked separately)."""
    tree, alloc = sched.tree_cache, sched.allocator
    chunked = -1 if sched.chunked_req is None else sched.chunked_req.rid
    nodes = getattr(tree, "num_nodes", 0)
    free = (alloc.full_available_size() if isinstance(alloc, SWATokenToKVPoolAllocator)
            else alloc.available_size())
    return (len(sched.trace.events), tree.evictable_size(), tree.protected_size(), nodes,
            chunked, free)


def page_owners(sched: SchedulerView) -> np.ndarray:
    """Every page's owner now (int64 ``[num_pages + 1]``) from a scheduler's state.

    Requests' own pages are the pages of their row from ``cache_protected_len`` (a whole
    page boundary) to ``kv_committed_len``; the tree's pages are its nodes' slots. On a
    sliding-window hybrid these are the full pool's pages (its SWA pool's:
    :func:`~pagedkv.managers.page_owners.swa_page_owners`).
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
    for full, locked, _, _ in tree_pages(sched.tree_cache):
        owners[full[::p] // p] = SHARED if locked else CACHED
    return owners
