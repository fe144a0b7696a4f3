"""The waiting queue and the requests not yet arrived: what the scheduler receives, and when.

Follows SGLang 0.5.23's ``managers/scheduler_components/request_receiver.py``
(``SchedulerRequestReceiver.recv_requests``: what has arrived by now is taken in at the start
of each loop iteration) and ``scheduler.py`` (``Scheduler.waiting_queue``,
``_add_request_to_queue``: a new request joins the back of the queue, FCFS; a retracted one
too, ``ScheduleBatch.retract_decode`` -> ``_add_request_to_queue``). pagedkv serves a fixed list of
requests, so arrival is a time: a request is received once the scheduler's clock has reached
its ``arrival_s``; a later turn of a conversation (``follows``) is sent when the turn before it
finishes, or at its own time if that is later.

The queue also keeps ``tokens``, the sum of ``fill_len`` over the waiting requests: SGLang
0.5.23 logs it as a prefill pass's ``#pending-token``.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from pagedkv.managers.req import Req
from pagedkv.mem_cache.chunk_cache import ChunkCache
from pagedkv.mem_cache.radix_cache import RadixCache

WAITING_PREFIX_REFRESH_INTERVAL = 32  # 0.5.23: refresh waiting prefixes every 32 passes
WAITING_PREFIX_REFRESH_REQS = 128  # ... of the first 128 waiting requests


@dataclass(slots=True, kw_only=True)
class WaitingQueue:
    """Requests waiting for a prefill pass (FCFS), and those still to arrive.

    Attributes:
        reqs: every request of the run, by rid.
        queue: the waiting requests, front first (SGLang's ``waiting_queue``).
        tokens: ``sum(r.fill_len for r in queue)``.
        arrivals: ``(arrival_s, rid)`` of requests not yet received, a heap.
        followers: rid -> the requests sent when it finishes (``follows``), in rid order.
        refresh_calls: prefill passes that could touch the waiting prefixes (0.5.23).
    """

    reqs: Sequence[Req]
    queue: deque[Req] = field(default_factory=deque)
    tokens: int = 0
    arrivals: list[tuple[float, int]] = field(default_factory=list)
    followers: dict[int, list[Req]] = field(default_factory=dict)
    refresh_calls: int = 0

    @classmethod
    def from_reqs(cls, reqs: Sequence[Req]) -> WaitingQueue:
        """An empty queue over ``reqs``: requests that follow none arrive at their
        ``arrival_s``; the others wait for the request they follow."""
        arrivals = [(r.arrival_s, r.rid) for r in reqs if r.follows is None]
        heapq.heapify(arrivals)
        followers: dict[int, list[Req]] = {}
        for r in reqs:
            if r.follows is not None:
                followers.setdefault(r.follows, []).append(r)
        return cls(reqs=reqs, arrivals=arrivals, followers=followers)

    # ----- the queue as a sequence ----------------------------------------------------------
    def __len__(self) -> int:
        return len(self.queue)

    def __bool__(self) -> bool:
        return bool(self.queue)

    def __iter__(self) -> Iterator[Req]:
        return iter(self.queue)

    def __getitem__(self, i: int) -> Req:
        return self.queue[i]

    # ----- arrivals -------------------------------------------------------------------------
    def recv_requests(self, clock: float) -> None:
        """Move every request whose arrival time is at or before ``clock`` (seconds) to the
        back of the queue, in arrival order (ties: by rid)."""
        arrivals = self.arrivals
        while arrivals and arrivals[0][0] <= clock:
            _, rid = heapq.heappop(arrivals)
            self.append(self.reqs[rid])

    def next_arrival_s(self) -> float | None:
        """When the next request arrives (None: none is due)."""
        return self.arrivals[0][0] if self.arrivals else None

    def send_followers(self, req: Req, clock: float) -> None:
        """``req`` finished at ``clock``: the turns that follow it are sent now, or at their
        own ``arrival_s`` if later."""
        for nxt in self.followers.pop(req.rid, ()):
            nxt.arrival_s = nxt.enqueued_s = max(nxt.arrival_s, clock)
            heapq.heappush(self.arrivals, (nxt.arrival_s, nxt.rid))

    def num_pending(self) -> int:
        """Requests not yet received (arriving later, or following one not finished)."""
        return len(self.arrivals) + sum(len(v) for v in self.followers.values())

    # ----- the queue ------------------------------------------------------------------------
    def append(self, req: Req) -> None:
        """``req`` joins the back of the queue (``_add_request_to_queue``)."""
        self.queue.append(req)
        self.tokens += req.fill_len

    def popleft(self) -> Req:
        """The front request leaves the queue (admitted).

        Raises:
            IndexError: the queue is empty.
        """
        req = self.queue.popleft()
        self.tokens -= req.fill_len
        return req

    def pop_admitted(self, admitted: Sequence[Req]) -> None:
        """The requests a prefill pass admitted leave the queue; they are its front, in
        order (FCFS). Source: ``get_new_batch_prefill`` (``waiting_queue`` minus
        ``can_run_list``).

        Raises:
            AssertionError: they are not the queue's front.
        """
        for req in admitted:
            if self.popleft() is not req:
                raise AssertionError("admitted requests must be a prefix of the queue (FCFS)")

    def touch_waiting_prefixes(self, tree_cache: RadixCache | ChunkCache) -> None:
        """0.5.23, FCFS with the tree on: every 32nd pass, mark the prefixes of the first 128
        waiting requests as just used (head last), so that eviction spares them.
        Source: ``SchedulePolicy._touch_waiting_prefixes``."""
        if tree_cache.disable or not self.queue:
            return
        refresh = self.refresh_calls % WAITING_PREFIX_REFRESH_INTERVAL == 0
        self.refresh_calls += 1
        if refresh:
            head = [self.queue[i] for i in range(min(WAITING_PREFIX_REFRESH_REQS, len(self.queue)))]
            for req in reversed(head):
                tree_cache.touch_prefix(req.token_ids(req.fill_len))

    def check_invariants(self) -> None:
        """Each request waits at most once and ``tokens`` is the queue's sum.

        Raises:
            AssertionError: either is broken.
        """
        assert len({r.rid for r in self.queue}) == len(self.queue)
        assert self.tokens == sum(r.fill_len for r in self.queue), self.tokens
