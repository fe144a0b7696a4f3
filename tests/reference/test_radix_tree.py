"""The radix tree: SGLang 0.5.9's ``RadixCache`` and 0.5.23's ``UnifiedRadixCache`` (its
default Rust core), built as the scheduler builds them, against pagedkv's ``RadixCache`` on
the same random sequences of inserts, matches, locks, unlocks, evictions and the scheduler's
make-room call (0.5.23: evict-for-alloc), page sizes 1, 4 and 16, over token sequences with
shared prefixes that split nodes inside and at page boundaries.

Compared after every step: matched lengths and slots, insert prefix lengths, evicted counts,
evictable and protected sizes, free slots, and the allocator's whole free list, which shows
which slots each step freed and in which order. 0.5.9 orders eviction by wall-clock access
time; steps run one after another, so its order is the order of the calls, as pagedkv's
integer clock and 0.5.23's counter give.
"""

from __future__ import annotations

import sgl_boot

sgl_boot.require()

import compare  # noqa: E402
import drive_tree as D  # noqa: E402
import pytest  # noqa: E402
import sgl_objects as sg  # noqa: E402
import tree_sglang  # noqa: E402

RANDOM_CASES, BLOCK = 1000, 200


def _sglang(case: dict) -> list:
    return D.run(case, tree_sglang.SglangTree(case["page_size"], case["pool_tokens"]))


def _pagedkv(case: dict) -> list:
    return D.run(case, D.PagedkvTree(case["page_size"], case["pool_tokens"], sg.VERSION))


@pytest.mark.parametrize("block", range(RANDOM_CASES // BLOCK))
def test_random_cases(block: int) -> None:
    compare.compare_seeds("radix tree", range(block * BLOCK, (block + 1) * BLOCK),
                          lambda s: D.random_case(s, sg.OLD), _sglang, _pagedkv)


def _directed(p: int, pages: int, steps: list) -> None:
    case = {"page_size": p, "pool_tokens": pages * p, "steps": steps}
    ours, theirs = _sglang(case), _pagedkv(case)
    compare.same("radix tree (directed)", ours, theirs, compare.first_difference(ours, theirs))


@pytest.mark.parametrize("p", D.TREE_PAGE_SIZES)
def test_shared_prefixes_splits_locks_and_lru_eviction(p: int) -> None:
    """Keys sharing 5 and 7 pages with an earlier one, matches that end inside a node, a
    key that is not page aligned, a lock, evictions of a few pages at a time, then all."""
    a = list(range(1, 1 + 10 * p))
    b = a[:5 * p] + list(range(200, 200 + 5 * p))
    c = list(range(400, 400 + 8 * p))
    d = a[:7 * p] + [999] * p
    e = list(range(600, 600 + 3 * p))
    f = list(range(800, 800 + 2 * p + 1))
    _directed(p, 64, [("insert", a), ("insert", b), ("insert", c),
                      ("match", a[:7 * p] + [5555] * 2), ("match", c[:3 * p]),
                      ("insert", d), ("insert", e), ("insert", f), ("match", f),
                      ("lock", 0, e), ("evict", 3 * p), ("evict", 4 * p), ("match", b),
                      ("evict", 1), ("evict", 6 * p), ("unlock", 0), ("evict", 1000)])


@pytest.mark.parametrize("p", D.TREE_PAGE_SIZES)
def test_make_room_when_exactly_enough_or_one_short(p: int) -> None:
    """``evict_from_tree_cache(n)`` with ``n`` equal to the free slots (nothing evicted), one
    page more (0.5.9 evicts ``n`` slots' worth, 0.5.23 only the shortfall)."""
    x = list(range(1, 1 + 3 * p))
    y = list(range(50, 50 + 2 * p))
    _directed(p, 8, [("insert", x), ("insert", y), ("take", 2), ("room", p), ("room", 2 * p),
                     ("room", 3 * p), ("match", y), ("room", 8 * p)])


@pytest.mark.parametrize("p", D.TREE_PAGE_SIZES)
def test_a_parent_left_without_children_is_evicted_in_turn(p: int) -> None:
    """Evicting the last child makes its parent a leaf with its old access time."""
    root = list(range(1, 1 + 2 * p))
    _directed(p, 16, [("insert", root + [7] * p), ("insert", root + [8] * p),
                      ("insert", list(range(90, 90 + p))), ("match", root + [7] * p),
                      ("evict", p), ("evict", p), ("evict", p), ("evict", p)])


@pytest.mark.skipif(sg.OLD, reason="0.5.9 has one tree, RadixCache")
def test_0523_runs_its_default_rust_tree_core() -> None:
    """The 0.5.23 tree compared above is the one SGLang serves with: the Rust core."""
    tree = tree_sglang.SglangTree(4, 64).tree
    assert type(tree.tree_core).__name__ == "RustUnifiedTreeCore"
