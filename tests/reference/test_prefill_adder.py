"""Admission: SGLang's ``PrefillAdder`` against pagedkv's over one prefill pass on the same real
state (see :mod:`drive_adder`): with and without chunked prefill (chunk sizes not always
whole pages), with and without the radix cache (evictable tokens in the budget, a matched
prefix off the newcomer's charge, the prefix locked while the request is decided), a carried
chunked request, retracted newcomers, ignore-EOS newcomers with the tree off and running
ignore-EOS requests. Compared exactly: each offer's result and extend length, the admitted
list, the chunked request, the log counters, and the budgets before the pass and after every
offer (``rem_total_tokens`` and ``cur_rem_tokens`` as floats, ``rem_input_tokens``,
``rem_chunk_tokens``).

Memory is allocated through SGLang's plain-torch paths while the state is built; the
allocation kernels are compared in ``test_allocator.py``.
"""

from __future__ import annotations

from functools import partial

import sgl_boot

sgl_boot.require()

import adder_sglang  # noqa: E402
import compare  # noqa: E402
import drive_adder as D  # noqa: E402
import pytest  # noqa: E402
import sgl_objects as sg  # noqa: E402

RANDOM_CASES, BLOCK = 1000, 200
_case = partial(D.make_case, sg.VERSION)
_req = D.request


def _sglang(case: dict) -> list:
    return [D.run(case, adder_sglang.SglangAdder)]


def _pagedkv(case: dict) -> list:
    return [D.run(case, D.PagedkvAdder)]


def _compare(area: str, case: dict) -> None:
    ours, theirs = _sglang(case), _pagedkv(case)
    compare.same(area, ours, theirs, compare.first_difference(ours, theirs))


@pytest.mark.parametrize("block", range(RANDOM_CASES // BLOCK))
def test_random_cases(block: int) -> None:
    compare.compare_seeds("prefill adder", range(block * BLOCK, (block + 1) * BLOCK),
                          lambda s: D.random_case(s, sg.VERSION), _sglang, _pagedkv)


@pytest.mark.parametrize("max_new", (48, 49, 50, 51))
def test_newcomer_at_the_exact_memory_boundary(max_new: int) -> None:
    """Page size 1, 100 free tokens, a prompt of 50: the newcomer is refused when
    ``50 + max_new`` (0.5.23: ``+ 1``) reaches ``rem_total_tokens`` exactly."""
    reqs = {"w": _req(50, max_new)}
    _compare("prefill adder (directed)", _case(1, 100, reqs, waiting=("w",)))


@pytest.mark.parametrize("running_left", ((3, 10.5), (3, 2.5), (7, 0.5), (11, -1.5)))
def test_chunk_continuation_takes_int_of_the_budget_unfloored(running_left: tuple) -> None:
    """A carried chunk continues with ``min(rem_chunk_tokens, int(rem_total_tokens))`` tokens,
    not floored to pages, and with the whole chunk budget once that is <= 0. Page size 4,
    chunk size 20; a running request reserving ``left * 0.5`` sets ``rem_total_tokens``."""
    left, _ = running_left
    reqs = {"r": _req(4, left + 1), "k": _req(40, 8, first=100)}
    pool = 6 if left == 3 and running_left[1] > 5 else 4
    _compare("prefill adder (directed)",
             _case(4, pool, reqs, ratio=0.5, chunk=20, running=("r",), chunked=("k", 8)))


@pytest.mark.parametrize("chunk", (7, 10, 16, 18))
def test_chunk_sizes_that_are_not_page_multiples(chunk: int) -> None:
    """A new request cut to ``rem_chunk_tokens // p * p`` (0.5.23: its end on a page boundary
    of the sequence), after a cached prefix that is matched."""
    shared = list(range(1, 13))
    reqs = {"c": _req([*shared, 50, 51], 1), "w": _req([*shared, *range(60, 90)], 5),
            "v": _req(6, 3, first=200)}
    _compare("prefill adder (directed)",
             _case(4, 40, reqs, radix=True, chunk=chunk, cached=("c",), waiting=("w", "v")))


@pytest.mark.parametrize("free_pages", (1, 2, 3, 4))
def test_locking_the_matched_prefix_removes_it_from_the_room(free_pages: int) -> None:
    """The newcomer's matched prefix (16 tokens) is the only evictable room; locked while the
    request is decided, it no longer counts. Page size 4, a running request reserving 0.7
    tokens, ``4 * free_pages`` free slots, a newcomer needing 9 (0.5.23: 13) tokens: 0.5.9
    passes the test before the lock and fails it after for 1 and 2 free pages, admits with 3;
    0.5.23 needs 4."""
    shared = list(range(1, 17))
    reqs = {"c": _req([*shared, 99], 1), "r": _req(4, 2, first=500), "w": _req([*shared, 7, 8, 9], 6)}
    _compare("prefill adder (directed)", _case(4, 5 + free_pages, reqs, radix=True, cached=("c",),
                                                running=("r",), waiting=("w",)))


@pytest.mark.parametrize("radix", (False, True))
def test_ignore_eos_newcomers_and_running_requests(radix: bool) -> None:
    """Tree off: ignore-EOS newcomers take the worst-case simulation; running ignore-EOS
    requests reserve at ratio 1.0 in 0.5.23."""
    reqs = {"r0": _req(6, 40, ignore_eos=True), "r1": _req(5, 30, first=50),
            "w0": _req(8, 20, first=100, ignore_eos=True), "w1": _req(9, 25, first=200, ignore_eos=True),
            "w2": _req(7, 30, first=300)}
    _compare("prefill adder (directed)", _case(1, 120, reqs, radix=radix, ratio=0.4, running=("r0", "r1"),
                                                grown={"r0": 3, "r1": 1}, waiting=("w0", "w1", "w2")))


@pytest.mark.parametrize("chunk", (None, 1000))
def test_max_prefill_tokens_with_and_without_chunking(chunk: int | None) -> None:
    """``max_prefill_tokens`` 100, prompts of 60: 0.5.9 stops at the second request either
    way; 0.5.23 checks it only without chunked prefill."""
    reqs = {f"w{i}": _req(60, 4, first=100 * i + 1) for i in range(3)}
    _compare("prefill adder (directed)",
             _case(1, 1000, reqs, chunk=chunk, max_prefill=100, waiting=("w0", "w1", "w2")))


def test_retracted_newcomer_is_charged_its_whole_max_new_tokens() -> None:
    """A retracted request (output kept, no KV) matches prompt + output; the test uses what it
    may still generate, the charge its whole ``max_new_tokens``."""
    reqs = {"w": _req(10, 30, generated=12), "v": _req(10, 30, first=50)}
    _compare("prefill adder (directed)", _case(1, 80, reqs, waiting=("w", "v")))
