"""The sliding-window radix tree: SGLang 0.5.23's ``UnifiedRadixCache`` with the components
``(FULL, SWA)`` (its default Rust tree core, and a block through its Python tree core) over a
real ``SWATokenToKVPoolAllocator``, against pagedkv's ``SWARadixCache``, on random sequences
of inserts (a third of them with a window-released prefix, so new leaves start as
tombstones), matches, locks, unlocks and evictions of full and SWA slots; page sizes 1, 4
and 16, windows of 1 to 3 pages and a few tokens, token sequences sharing prefixes that split
nodes inside and at page boundaries.

Compared after every step: insert prefix lengths, matched lengths and slots (where the window
gates a match), evicted full and SWA counts, the four ledgers (full and SWA, evictable and
protected), both pools' free-slot counts and both whole free lists (which slots each step freed,
in which order: duplicates on insert, revived tombstones, deleted leaves, tombstoned nodes).
The steps include the decode-memory check (the allocator's ``check_decode_capacity``, which
evicts each pool's shortfall through the tree's ``evict_for_alloc``).
"""

from __future__ import annotations

import sgl_boot

sgl_boot.require()

import compare  # noqa: E402
import drive_swa_tree as D  # noqa: E402
import pytest  # noqa: E402
import sgl_objects as sg  # noqa: E402
import swa_tree_sglang  # noqa: E402

if sg.OLD:
    pytest.skip("pagedkv follows SGLang 0.5.23's sliding-window radix tree only",
                allow_module_level=True)

RANDOM_CASES, BLOCK = 400, 200
PYTHON_CORE_CASES, PYTHON_CORE_SEED0 = 100, 1_000_000


def _args(case: dict) -> tuple[int, int, int, int]:
    return case["page_size"], case["pool_tokens"], case["swa_tokens"], case["window"]


def _compare(area: str, seeds: range, core: str | None) -> None:
    compare.compare_seeds(area, seeds, D.random_case,
                          lambda c: D.run(c, swa_tree_sglang.SglangSWATree(*_args(c), core=core)),
                          lambda c: D.run(c, D.PagedkvSWATree(*_args(c))))


@pytest.mark.parametrize("block", range(RANDOM_CASES // BLOCK))
def test_random_cases(block: int) -> None:
    _compare("SWA radix tree", range(block * BLOCK, (block + 1) * BLOCK), None)


def test_random_cases_python_tree_core() -> None:
    _compare("SWA radix tree (Python core)",
             range(PYTHON_CORE_SEED0, PYTHON_CORE_SEED0 + PYTHON_CORE_CASES), "python")


T = list(range(100, 124))


def _directed(p: int, window: int, steps: list, pages: tuple[int, int] = (40, 20)) -> None:
    case = {"page_size": p, "pool_tokens": pages[0] * p, "swa_tokens": pages[1] * p,
            "window": window, "steps": steps}
    ours = D.run(case, swa_tree_sglang.SglangSWATree(*_args(case)))
    theirs = D.run(case, D.PagedkvSWATree(*_args(case)))
    compare.same("SWA radix tree (directed)", ours, theirs, compare.first_difference(ours, theirs))


@pytest.mark.parametrize("p", D.PAGE_SIZES)
def test_a_match_ends_only_where_a_window_of_live_swa_follows_the_last_tombstone(p: int) -> None:
    """A leaf capped at one window, its older part tombstoned by SWA eviction: matches
    inside or just past the tombstone stop at 0, the whole key matches."""
    n = 4 * p
    _directed(p, p + 2, [("insert", T[:n], 0), ("evict", 0, 1), ("match", T[:n // 2]),
                         ("match", T[:n // 2 + p]), ("match", T[:n]), ("match", [*T[:n], 7])])


@pytest.mark.parametrize("p", D.PAGE_SIZES)
def test_inserting_over_a_tombstone_revives_it_locked_or_not(p: int) -> None:
    """The same key again: an unlocked tombstone takes the incoming slots (its old full
    slots freed); one whose full slots a lock holds keeps them and takes only the incoming
    SWA slots. With a released prefix the part below it stays a tombstone."""
    n = 6 * p
    _directed(p, p + 1, [("insert", T[:n], 0), ("evict", 0, 100), ("insert", T[:n], 0),
                         ("lock", 9, T[:n]), ("evict", 0, 100), ("insert", T[:n], 2),
                         ("match", T[:n]), ("unlock", 9), ("evict", 100, 0)])


@pytest.mark.parametrize("p", D.PAGE_SIZES)
def test_a_key_released_past_its_end_is_cached_for_its_full_slots_only(p: int) -> None:
    _directed(p, 2 * p, [("insert", T[:3 * p], 3), ("match", T[:3 * p]), ("evict", 0, 50),
                         ("evict", p, 0)])


@pytest.mark.parametrize("p", D.PAGE_SIZES)
def test_the_decode_check_evicts_each_pools_shortfall(p: int) -> None:
    """Short of SWA only: one inner node is tombstoned, the full pool is untouched; short of
    more than both pools hold: the full walk deletes leaf after leaf (their SWA slots count
    toward the SWA side) until nothing is cached, and the check fails."""
    _directed(p, p + 2, [("insert", T[:4 * p], 0), ("room", 2 * p), ("room", 30 * p)],
              pages=(10, 5))


@pytest.mark.parametrize("p", D.PAGE_SIZES)
@pytest.mark.parametrize("released", [0, 1])
def test_a_running_requests_next_checkpoint_frees_nothing_it_inserted_before(p: int,
                                                                            released: int) -> None:
    """Two checkpoints of one request (the second with ``prev_prefix_len``), the second's first
    new page window-released or not, then a match of the whole key."""
    more = [1, 2, 3, 4] * (2 * p)
    _directed(p, p + 2, [("checkpoint", T[:2 * p], more[:2 * p], released),
                         ("match", T[:2 * p] + more[:2 * p])])
