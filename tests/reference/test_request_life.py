"""A request's life with the radix cache: real SGLang ``Req`` objects through its tree cache
(``init_next_round_input``, ``cache_unfinished_req`` / ``checkpoint_kv_cache``, the chunk
stash, ``release_kv_cache`` with and without insert, the allocation helpers that evict first,
``release_req``'s eviction) against pagedkv's ``RadixCache`` and allocator on the same token
ids, page sizes 1, 4 and 16: identical ``req_to_token`` rows, tree-protected lengths, matched
prefixes, tree sizes and free lists after every step. See :mod:`drive_life` for the steps.

Allocation here runs SGLang's plain-torch paths (0.5.9's paged decodes run its Triton
kernel, its only path); the kernels themselves are compared in ``test_allocator.py``.
"""

from __future__ import annotations

import sgl_boot

sgl_boot.require()

import compare  # noqa: E402
import drive_life as D  # noqa: E402
import life_pagedkv as LP  # noqa: E402
import life_sglang as LS  # noqa: E402
import pytest  # noqa: E402
import sgl_objects as sg  # noqa: E402

RANDOM_CASES, BLOCK = 1000, 200


def _sglang(case: dict) -> list:
    return D.run(case, D.setup(case, LS.SglangLife, case["radix"]))


def _pagedkv(case: dict) -> list:
    return D.run(case, D.setup(case, LP.PagedkvLife, sg.VERSION, case["radix"]))


@pytest.mark.parametrize("block", range(RANDOM_CASES // BLOCK))
def test_random_cases(block: int) -> None:
    compare.compare_seeds("request life", range(block * BLOCK, (block + 1) * BLOCK),
                          lambda s: D.random_case(s, sg.VERSION), _sglang, _pagedkv)


def _directed(p: int, pages: int, requests: dict, steps: list) -> None:
    case = {"version": sg.VERSION, "page_size": p, "pool_tokens": pages * p,
            "requests": requests, "steps": steps, "radix": True}
    ours, theirs = _sglang(case), _pagedkv(case)
    compare.same("request life (directed)", ours, theirs, compare.first_difference(ours, theirs))


SYSTEM = list(range(100, 120))  # 20 tokens: 20, 5 and 1.25 pages


@pytest.mark.parametrize("p", (1, 4, 16))
def test_retracted_request_keeps_its_prompt_in_the_tree_and_matches_it_again(p: int) -> None:
    """Retraction frees a request's private KV (its output, the partial page) and leaves its
    prompt's whole pages in the tree, evictable; its re-prefill matches them again."""
    reqs = {"a": ([*SYSTEM, 1, 2, 3], 6, [7, 8, 9, 10, 11, 12]),
            "b": ([*SYSTEM, 4, 5], 6, [13, 14, 15, 16, 17, 18])}
    _directed(p, 24, reqs, [("prefill", [("a", None), ("b", None)], 0), ("decode",), ("decode",),
                            ("retract", 0), ("decode",), ("prefill", [("a", None)], 0),
                            ("decode",), ("decode",), ("decode",), ("decode",)])


@pytest.mark.parametrize("p", (1, 4, 16))
def test_a_finished_answer_is_matched_by_the_next_turn(p: int) -> None:
    """At finish the prompt and all but the last output token go into the tree (0.5.23 splits
    the node at the prompt boundary); the next turn's prompt repeats them."""
    first = [*SYSTEM, 1, 2, 3, 4, 5]
    answer = [31, 32, 33, 34, 35, 36, 37]
    reqs = {"t1": (first, 7, answer), "t2": (first + answer + [40, 41], 2, [42, 43])}
    _directed(p, 24, reqs, [("prefill", [("t1", None)], 0)] + [("decode",)] * 6
              + [("prefill", [("t2", None)], 0), ("decode",)])


@pytest.mark.parametrize("p", (4, 16))
def test_chunks_ending_mid_page_are_stashed_and_finished(p: int) -> None:
    """A prompt cut into a whole-page first chunk, then continuations of lengths that are not
    page multiples: each stash inserts only whole pages, the partial page stays the request's."""
    reqs = {"long": (list(range(1, 1 + 5 * p + 3)), 2, [90, 91]), "short": (SYSTEM[:p + 1], 2, [92, 93])}
    _directed(p, 16, reqs, [("prefill", [("long", p)], 0), ("prefill", [("short", None)], p + 1),
                            ("prefill", [], p - 1), ("prefill", [], 5 * p), ("decode",)])


@pytest.mark.parametrize("p", (1, 4, 16))
def test_two_requests_of_one_pass_compute_the_same_new_prefix(p: int) -> None:
    """Neither finds the shared prefix cached; the second one's cache step finds the first
    one's copy in the tree, frees its own duplicate slots and points its row at the tree's."""
    reqs = {"x": ([*SYSTEM, 1], 3, [5, 6, 7]), "y": ([*SYSTEM, 2], 3, [8, 9, 10])}
    _directed(p, 24, reqs, [("prefill", [("x", None), ("y", None)], 0), ("decode",), ("decode",)])


@pytest.mark.parametrize("p", (1, 4, 16))
def test_allocation_evicts_the_least_recently_used_cached_prompts(p: int) -> None:
    """A pool full of finished requests' cached prompts: a new prefill evicts (0.5.9 the
    amount asked for, 0.5.23 only the shortfall) and a later request finds what is left."""
    reqs = {f"r{i}": ([10 * i + j for j in range(1, 2 * p + 2)], 1, [7]) for i in range(4)}
    reqs["big"] = (list(range(500, 500 + 4 * p)), 1, [8])
    reqs["again"] = (reqs["r3"][0] + [9], 1, [9])
    steps = [("prefill", [(f"r{i}", None)], 0) for i in range(4)]
    _directed(p, 10, reqs, [*steps, ("prefill", [("big", None)], 0), ("prefill", [("again", None)], 0)])
