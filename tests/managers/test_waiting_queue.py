"""WaitingQueue alone: arrivals by time, FCFS order, followers, the pending-token sum."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pagedkv.managers.req import Req
from pagedkv.managers.scheduler_components import WaitingQueue
from pagedkv.workloads.synthetic import RequestSpec


def reqs(*specs: tuple[int, float, int | None]) -> list[Req]:
    """``(prompt_len, arrival_s, follows)`` each."""
    return [Req.from_spec(i, RequestSpec(p, 2, 4, a, follows=f)) for i, (p, a, f) in enumerate(specs)]


def test_requests_arrive_in_time_order_and_ties_by_rid() -> None:
    q = WaitingQueue.from_reqs(reqs((5, 0.2, None), (7, 0.0, None), (3, 0.2, None), (4, 1.0, None)))
    assert q.next_arrival_s() == 0.0 and len(q) == 0 and not q
    q.recv_requests(0.1)
    assert [r.rid for r in q] == [1] and q.tokens == 7
    q.recv_requests(0.2)  # both due at 0.2, lower rid first
    assert [r.rid for r in q] == [1, 0, 2] and q.tokens == 15 and q[0].rid == 1
    assert q.next_arrival_s() == 1.0 and q.num_pending() == 1
    assert q.popleft().rid == 1 and q.tokens == 8
    q.check_invariants()


def test_a_follower_is_sent_when_its_turn_before_finishes_or_at_its_own_time() -> None:
    rs = reqs((5, 0.0, None), (6, 0.5, 0), (6, 9.0, 0))
    q = WaitingQueue.from_reqs(rs)
    assert q.num_pending() == 3 and q.followers == {0: [rs[1], rs[2]]}
    q.recv_requests(0.0)
    q.send_followers(q.popleft(), 2.0)  # finished at 2.0: rid 1 (due 0.5) is sent at 2.0
    assert (rs[1].arrival_s, rs[1].enqueued_s, rs[2].arrival_s) == (2.0, 2.0, 9.0)
    assert q.next_arrival_s() == 2.0 and q.num_pending() == 2 and q.followers == {}
    q.recv_requests(5.0)
    assert [r.rid for r in q] == [1]


def test_a_retracted_request_joins_the_back_with_its_output() -> None:
    rs = reqs((5, 0.0, None), (6, 0.0, None))
    q = WaitingQueue.from_reqs(rs)
    q.recv_requests(0.0)
    first = q.popleft()
    first.generated = 3
    q.append(first)
    assert [r.rid for r in q] == [1, 0] and q.tokens == 6 + 8
    q.check_invariants()
    q.tokens += 1
    with pytest.raises(AssertionError):
        q.check_invariants()


def test_popleft_of_an_empty_queue_raises() -> None:
    with pytest.raises(IndexError):
        WaitingQueue.from_reqs([]).popleft()


@given(st.lists(st.tuples(st.integers(1, 50), st.floats(0, 10)), min_size=1, max_size=30),
       st.lists(st.floats(0, 12), max_size=10))
def test_tokens_and_pending_stay_consistent(specs: list[tuple[int, float]],
                                            clocks: list[float]) -> None:
    q = WaitingQueue.from_reqs(reqs(*[(p, a, None) for p, a in specs]))
    for clock in sorted(clocks):
        q.recv_requests(clock)
        assert all(r.arrival_s <= clock for r in q)
        assert len(q) + q.num_pending() == len(specs)
        q.check_invariants()
    arrived = [r.arrival_s for r in q]
    assert arrived == sorted(arrived)


class _Tree:
    """A tree that records the keys touched (``touch_prefix``)."""

    disable = False

    def __init__(self) -> None:
        self.touched: list[list[int]] = []

    def touch_prefix(self, key: object) -> None:
        self.touched.append([int(x) for x in key])  # type: ignore[attr-defined]


def test_waiting_prefixes_are_touched_every_32nd_pass_head_last() -> None:
    rs = [Req.from_spec(i, RequestSpec(2, 2, 4, 0.0, input_ids=(10 * i, 10 * i + 1)))
          for i in range(3)]
    q = WaitingQueue.from_reqs(rs)
    q.recv_requests(0.0)
    tree = _Tree()
    q.touch_waiting_prefixes(tree)  # type: ignore[arg-type]
    assert tree.touched == [[20, 21], [10, 11], [0, 1]] and q.refresh_calls == 1
    for _ in range(31):
        q.touch_waiting_prefixes(tree)  # type: ignore[arg-type]
    assert len(tree.touched) == 3 and q.refresh_calls == 32
    q.touch_waiting_prefixes(tree)  # type: ignore[arg-type]
    assert len(tree.touched) == 6
    tree.disable = True  # the radix cache off: nothing to touch, the count stays
    q.touch_waiting_prefixes(tree)  # type: ignore[arg-type]
    assert q.refresh_calls == 33


def test_pop_admitted_takes_the_front_in_order() -> None:
    q = WaitingQueue.from_reqs(reqs((5, 0.0, None), (6, 0.0, None), (7, 0.0, None)))
    q.recv_requests(0.0)
    front = [q[0], q[1]]
    q.pop_admitted(front)
    assert [r.rid for r in q] == [2] and q.tokens == 7
    with pytest.raises(AssertionError, match="FCFS"):
        q.pop_admitted([q.reqs[0]])
