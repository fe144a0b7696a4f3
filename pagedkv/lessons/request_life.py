"""One request's life in pages, step by step: admitted and prefilled, its prompt inserted
into the radix cache, decoded, retracted or finished, and its cached pages evicted.

:func:`request_life` replays chapter 5's small run
(:func:`pagedkv.lessons.examples.tiny_retraction_scheduler`) one step at a time and, after
every step, reads who owns each page (:func:`pagedkv.managers.page_recorder.page_owners`).
The pages it follows are the ones the request holds, and after it lets go, the ones it held
last: that is where its cached prompt and answer stay until eviction frees them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pagedkv.errors import bad_value
from pagedkv.lessons.examples import tiny_retraction_scheduler
from pagedkv.managers.page_recorder import CACHED, SHARED, page_owners


@dataclass(frozen=True)
class RequestLife:
    """Pages of one request after every step of the run.

    Attributes:
        rid: the request. page_size: tokens per page.
        own, locked, cached: int arrays ``[steps]``: its own pages (written since its
            prefix), its pages in the radix cache locked while it runs, and pages it held
            that the cache keeps, unlocked and evictable, after it let go.
        events: ``(step, what)`` in order: "admitted", "re-prefilled", "retracted",
            "finished", and "evicted" whenever eviction takes some of its cached pages.
    """

    rid: int
    page_size: int
    own: np.ndarray
    locked: np.ndarray
    cached: np.ndarray
    events: tuple[tuple[int, str], ...]


_EVENTS = {"admit": "admitted, prefilled, prompt inserted into the tree",
           "reprefill": "re-prefilled", "retract": "retracted", "finish": "finished"}


def request_life(rid: int | None = None) -> RequestLife:
    """Follow ``rid`` (default: the request the run retracts first) through the whole run.

    Raises:
        pagedkv.errors.ConfigError: ``rid`` is not a request of the run.
    """
    sched = tiny_retraction_scheduler(fast_forward=False)
    if rid is None:
        rid = tiny_retraction_scheduler().run().events_of("retract")[0].rid
    if not isinstance(rid, int) or not 0 <= rid < len(sched.reqs):
        raise bad_value("rid", rid, f"a request id 0-{len(sched.reqs) - 1}")
    req, p = sched.reqs[rid], sched.page_size
    held: np.ndarray = np.zeros(0, dtype=np.int64)
    own, locked, cached, evicted = [], [], [], []
    before = np.zeros(0, dtype=np.int64)
    for _ in sched.steps():
        owners = page_owners(sched)
        running = any(r is req and not done for r, done in
                      zip(sched.running.reqs, sched.running.finished.tolist(), strict=True))
        if running:
            row = sched.req_to_token_pool.req_to_token[req.req_pool_idx, :req.kv_committed_len:p]
            held = row.numpy() // p
        else:  # once a page is not cached and unlocked it is no longer this request's: it was
            # evicted (and perhaps handed to another request, whose prompt may lock it)
            held = held[owners[held] == CACHED]
        now = owners[held]
        own.append(int(np.sum(now == rid)))
        locked.append(int(np.sum(now == SHARED)) if running else 0)
        cached.append(int(np.sum(now == CACHED)) if not running else 0)
        if not running and np.any(~np.isin(before, held)):
            evicted.append(sched.num_steps - 1)
        before = held if not running else np.zeros(0, dtype=np.int64)
    events = [(e.step, _EVENTS[e.kind]) for e in sched.trace.events
              if e.rid == rid and e.kind in _EVENTS]
    if evicted:  # the first and the last eviction of its pages, as they often come in runs
        events.append((evicted[0], "its cached pages evicted" if len(evicted) == 1
                       else "eviction starts on its cached pages"))
        if len(evicted) > 1:
            events.append((evicted[-1], "its last cached page evicted" if not len(before)
                           else "evicted again"))
    return RequestLife(rid, p, np.array(own), np.array(locked), np.array(cached),
                       tuple(sorted(events)))
