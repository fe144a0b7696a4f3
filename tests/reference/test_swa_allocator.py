"""Sliding-window hybrids' allocator: SGLang 0.5.23's ``SWATokenToKVPoolAllocator``
(``mem_cache/allocator/swa.py``) against pagedkv's, page sizes 1, 2, 4, 16 and 64: the full
slots of every extend and decode (out of memory in either pool included), window releases
(``free_swa_segment``, ``free_swa``, inside free groups or not), request releases
(``free_full`` / ``free_full_segment`` for the window-released part, ``free`` /
``free_segment`` / split frees for the rest), and after every step both pools' free-slot
counts, both free lists and the whole full->SWA mapping.

As in ``test_allocator.py`` the bulk runs SGLang's plain-torch allocation (what 0.5.23 picks
on a CPU) and a separate block runs both pools' Triton kernels in the interpreter. 0.5.9 has
the class too, but pagedkv schedules sliding-window hybrids as 0.5.23 only: 0.5.23 only.
"""

from __future__ import annotations

import sgl_boot

sgl_boot.require()

import compare  # noqa: E402
import drive_swa_alloc as D  # noqa: E402
import pytest  # noqa: E402
import sgl_objects as sg  # noqa: E402
import swa_alloc_sglang  # noqa: E402

if sg.OLD:
    pytest.skip("pagedkv follows SGLang 0.5.23's sliding-window allocator only",
                allow_module_level=True)

RANDOM_CASES, BLOCK = 400, 200
TRITON_CASES, TRITON_SEED0 = 30, 1_000_000  # the interpreted kernels are slow


def _case(seed: int, kernels: str) -> dict:
    case = D.random_case(seed)
    case["kernels"] = kernels
    return case


def _compare(area: str, seeds: range, kernels: str) -> None:
    compare.compare_seeds(area, seeds, lambda s: _case(s, kernels),
                          lambda c: D.run(c, swa_alloc_sglang.SglangSWAPool),
                          lambda c: D.run(c, D.PagedkvSWAPool))


@pytest.mark.parametrize("block", range(RANDOM_CASES // BLOCK))
def test_random_cases(block: int) -> None:
    _compare("SWA allocator", range(block * BLOCK, (block + 1) * BLOCK), "torch")


def test_random_cases_triton_kernels() -> None:
    _compare("SWA allocator (Triton)", range(TRITON_SEED0, TRITON_SEED0 + TRITON_CASES), "triton")


def _directed(p: int, full_pages: int, swa_pages: int, steps: list) -> None:
    case = {"page_size": p, "pool_tokens": full_pages * p, "swa_tokens": swa_pages * p,
            "steps": steps, "kernels": "triton"}
    ours, theirs = D.run(case, swa_alloc_sglang.SglangSWAPool), D.run(case, D.PagedkvSWAPool)
    compare.same("SWA allocator (directed)", ours, theirs, compare.first_difference(ours, theirs))


@pytest.mark.parametrize("p", D.PAGE_SIZES)
def test_the_smaller_swa_pool_refuses_an_extend_the_full_pool_could_take(p: int) -> None:
    """Out of memory in the SWA pool alone: None, nothing taken from the full pool."""
    _directed(p, 8, 3, [("extend", [("a", 2 * p, None)]), ("extend", [("b", p + 1, None)]),
                        ("extend", [("c", p, None)])])


@pytest.mark.parametrize("p", D.PAGE_SIZES)
def test_window_release_frees_swa_pages_that_a_new_request_then_takes(p: int) -> None:
    """A request's tokens leave the window: their SWA pages go to the front of the SWA free
    list and are the next taken; its release later frees the full side alone there."""
    _directed(p, 10, 4, [("extend", [("a", 3 * p + 1, None)]), ("window", [("a", 1)], True, "segment"),
                         ("extend", [("b", 2 * p, None)]), ("decode", ["a", "b"]),
                         ("free", [("a", "segment"), ("b", "free")], True)])
