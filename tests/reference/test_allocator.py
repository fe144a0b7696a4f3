"""Allocators: SGLang's ``TokenToKVPoolAllocator`` / ``PagedTokenToKVPoolAllocator`` against
pagedkv's, page sizes 1, 2, 4, 16 and 64: the slots of every extend (new requests, requests
starting on a cached prefix, chunk continuations ending mid-page) and decode, out of memory,
frees (``free``, split frees, 0.5.23's row-order ``free_segment``, free groups), and after
every step the free-slot count and the whole free list.

Paged allocation runs in SGLang as Triton kernels. The bulk of the random cases runs SGLang's
plain-torch code for the same arithmetic (0.5.23's ``alloc_extend_naive`` /
``alloc_decode_naive``, the path 0.5.23 itself takes on a CPU; 0.5.9's ``alloc_extend_naive``,
while 0.5.9 decodes always run its kernel, having no other path); a separate block of seeds
runs every paged allocation through the Triton kernels in Triton's CPU interpreter, which is
about ten times slower.
"""

from __future__ import annotations

import sgl_boot

sgl_boot.require()

import alloc_sglang  # noqa: E402
import compare  # noqa: E402
import drive_alloc as D  # noqa: E402
import pytest  # noqa: E402
import sgl_objects as sg  # noqa: E402

RANDOM_CASES, BLOCK = 1000, 200
TRITON_CASES, TRITON_BLOCK, TRITON_SEED0 = 200, 100, 1_000_000


def _case(seed: int, kernels: str) -> dict:
    case = D.random_case(seed, sg.OLD)
    case["kernels"] = kernels
    return case


def _compare(area: str, seeds: range, kernels: str) -> None:
    compare.compare_seeds(area, seeds, lambda s: _case(s, kernels),
                          lambda c: D.run(c, alloc_sglang.SglangPool), lambda c: D.run(c, D.PagedkvPool))


@pytest.mark.parametrize("block", range(RANDOM_CASES // BLOCK))
def test_random_cases(block: int) -> None:
    _compare("allocator", range(block * BLOCK, (block + 1) * BLOCK), "torch")


@pytest.mark.parametrize("block", range(TRITON_CASES // TRITON_BLOCK))
def test_random_cases_triton_kernels(block: int) -> None:
    start = TRITON_SEED0 + block * TRITON_BLOCK
    _compare("allocator (Triton)", range(start, start + TRITON_BLOCK), "triton")


def _directed(p: int, pool_pages: int, steps: list, kernels: str = "triton") -> None:
    case = {"page_size": p, "pool_tokens": pool_pages * p, "steps": steps, "kernels": kernels}
    ours, theirs = D.run(case, alloc_sglang.SglangPool), D.run(case, D.PagedkvPool)
    compare.same("allocator (directed)", ours, theirs, compare.first_difference(ours, theirs))


@pytest.mark.parametrize("p", D.PAGE_SIZES)
def test_extend_that_needs_exactly_the_free_pages_fits_and_one_more_does_not(p: int) -> None:
    """Out of memory at the boundary: all free pages taken, then one token more than fits."""
    _directed(p, 4, [("extend", [("a", 3 * p + 1, None)]),
                     ("extend", [("b", p, None), ("c", 1, None)]),
                     ("free", [("a", "free")], False),
                     ("extend", [("d", 4 * p, None)])])


@pytest.mark.parametrize("p", D.PAGE_SIZES)
def test_decode_needs_a_page_only_at_a_page_boundary(p: int) -> None:
    """A full pool: decodes that stay inside a partial page still fit, one that starts a
    page does not (all-or-nothing for the batch)."""
    _directed(p, 3, [("extend", [("a", 2 * p - 1 if p > 1 else 1, None), ("b", p, None)]),
                     ("decode", ["a"]), ("decode", ["a", "b"]), ("decode", ["b"])])


@pytest.mark.parametrize("p", (2, 4, 16, 64))
def test_chunk_continuations_fill_their_partial_page_first(p: int) -> None:
    """Chunks ending mid-page (not page multiples): the next chunk continues in place."""
    _directed(p, 12, [("cache", "c0", 2),
                      ("extend", [("a", p + 1, ("c0", 1)), ("b", 1, None)]),
                      ("extend", [("b", p - 1, None), ("a", 2 * p + 3, None)]),
                      ("extend", [("a", 1, None)]), ("decode", ["a", "b"]),
                      ("free", [("b", "split"), ("a", "free")], True)])


@pytest.mark.parametrize("p", D.PAGE_SIZES)
def test_free_group_keeps_the_release_order_of_its_calls(p: int) -> None:
    """A free group holding plain frees and (0.5.23) row-order segment frees. Page size 1:
    SGLang's token allocator frees page ids with ``free`` too, so the group releases every
    call in call order (pagedkv put the plain frees first, fixed)."""
    hows = ("free", "split") if sg.OLD else ("segment", "free", "split")
    steps = [("extend", [(f"r{i}", 2 * p + i, None) for i in range(len(hows))]),
             ("free", [(f"r{i}", how) for i, how in enumerate(hows)], True)]
    _directed(p, 12, steps)
