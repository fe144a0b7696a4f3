"""Decode memory: SGLang's ``ScheduleBatch.check_decode_mem`` and ``retract_decode`` against
pagedkv's on the same running batch (see :mod:`drive_retract`), with the radix cache on (the
check and every release evict from the tree; a victim's prompt stays cached) and off, page
sizes 1, 4 and 16. Compared: the slots needed, the check's answer, the victims in pop order
(the scheduler's re-queue order), the new ``new_token_ratio`` exactly, the kept batch in its
new order, ``#new_tokens_gained``, the 0.5.23 abort or the 0.5.9 error when even the last
request cannot decode, the tree sizes, the free slots, the whole free list and the kept
requests' rows afterwards.
"""

from __future__ import annotations

from functools import partial

import sgl_boot

sgl_boot.require()

import compare  # noqa: E402
import drive_retract as D  # noqa: E402
import pytest  # noqa: E402
import retract_sglang  # noqa: E402
import sgl_objects as sg  # noqa: E402

RANDOM_CASES, BLOCK = 1000, 200
_batch = partial(D.batch_case, sg.VERSION)


def _sglang(case: dict) -> list:
    return [D.run(case, retract_sglang.SglangRetract)]


def _pagedkv(case: dict) -> list:
    return [D.run(case, D.PagedkvRetract)]


def _compare(case: dict) -> dict:
    ours, theirs = _sglang(case), _pagedkv(case)
    compare.same("retract (directed)", ours, theirs, compare.first_difference(ours, theirs))
    return ours[0]


@pytest.mark.parametrize("block", range(RANDOM_CASES // BLOCK))
def test_random_cases(block: int) -> None:
    compare.compare_seeds("retract", range(block * BLOCK, (block + 1) * BLOCK),
                          lambda s: D.random_case(s, sg.VERSION), _sglang, _pagedkv)


def test_ties_on_the_retraction_key_go_later_index_first_and_survivors_stay_sorted() -> None:
    """Key ``(len(output), -len(prompt))``, stable sort reversed, victims popped from the end:
    among exact ties the later batch index goes first; the kept batch is left in sorted
    order. Three requests tie at (5, -10)."""
    out = _compare(_batch(1, [(10, 100, 5), (12, 100, 5), (10, 100, 5), (10, 100, 5), (8, 100, 6)]))
    assert not out["fits"]


def test_several_victims_are_requeued_and_freed_in_pop_order() -> None:
    """Five identical requests, no free slot: victims leave one by one until the rest fits;
    each one's slots go back as it leaves (the free list shows the order)."""
    _compare(_batch(1, [(2, 100, 1)] * 5))


@pytest.mark.parametrize("p", (1, 4, 16))
def test_the_last_request_that_cannot_decode(p: int) -> None:
    """One request whose next token needs a page, none free: 0.5.9 raises, 0.5.23 aborts it
    (its KV freed, the batch empty, the ratio then 0)."""
    out = _compare(_batch(p, [(p, 10, 1)]))
    assert out["raised"] if sg.OLD else out["aborted"] == ["r0"]


@pytest.mark.parametrize("p", (1, 4))
def test_with_the_tree_the_check_evicts_before_retracting(p: int) -> None:
    """Cached sequences are evicted by the check itself (0.5.9: the whole amount asked for;
    0.5.23: the shortfall), and by each victim's release (``remaining * 20``)."""
    out = _compare(_batch(p, [(3 * p, 40, 1), (2 * p, 40, 1), (4 * p, 40, 1)], radix=True,
                              cached=(p,)))
    assert not out["fits"] and out["retracted"]
