"""The radix tree over state slots (a linear-attention hybrid's prefix cache): SGLang 0.5.23's
``UnifiedRadixCache`` with the components ``(FULL, MAMBA)`` (its default Rust tree core, and
a block through its Python tree core) over a real token allocator and a real
``HybridReqToTokenPool``'s ``MambaSlotAllocator``, against pagedkv's ``MambaRadixCache``, on
random sequences of inserts (each with the state slot for its end), matches, locks, unlocks,
evictions of KV slots and states (``evict`` and ``evict_for_alloc``), state slots held
outside the tree, and a running request's two inserts (``prev_prefix_len``); page sizes 1, 4,
16 and 64, token sequences sharing prefixes that split nodes inside and at page boundaries,
some past the 64-token checkpoint grid.

Compared after every step: insert prefix lengths and ``mamba_exist``, matched lengths, slots and
``mamba_branching_seqlen``, evicted KV and state counts, the four ledgers (KV and states,
evictable and protected), both free counts and both whole free lists (which KV pages and
which state slots each step freed, in which order). :data:`RANDOM_CASES` were compared with
0 disagreements (and 150 through the Python core).
"""

from __future__ import annotations

from collections import Counter

import sgl_boot

sgl_boot.require()

import compare  # noqa: E402
import drive_mamba_tree as D  # noqa: E402
import pytest  # noqa: E402
import sgl_objects as sg  # noqa: E402

if sg.OLD:
    pytest.skip("pagedkv follows SGLang 0.5.23's radix tree over state slots only",
                allow_module_level=True)

import mamba_tree_sglang  # noqa: E402

RANDOM_CASES, BLOCK = 1000, 250
PYTHON_CORE_CASES, PYTHON_CORE_SEED0 = 100, 1_000_000
COVERAGE = {"a match cut short by a missing state": 100, "mamba_branching_seqlen": 100,
            "mamba_exist": 100, "state tombstoned": 100, "leaf evicted by the state walk": 100,
            "checkpoint": 100, "evict_for_alloc freed a state": 100}
SEEN: Counter[str] = Counter()


def _args(case: dict) -> tuple[int, int, int]:
    return case["page_size"], case["pool_tokens"], case["slots"]


class _Noting(D.PagedkvMambaTree):
    """pagedkv's side, noting in :data:`SEEN` what the case exercised (from pagedkv's own
    tree: how far each match's KV walk went, which evictions tombstoned a state)."""

    def match(self, tokens: list[int]) -> tuple[list, object]:
        out = super().match(tokens)
        SEEN["a match cut short by a missing state"] += self.tree.full_kv_hit_length > out[0][0]
        SEEN["mamba_branching_seqlen"] += out[0][2] is not None
        return out

    def _tombstones(self) -> int:
        return sum(n.mamba is None for n in self.tree.nodes())

    def _noting_evict(self, how: str, full: int, mamba: int) -> tuple[int, int]:
        before = self._tombstones()
        out = getattr(super(), how)(full, mamba)
        SEEN["state tombstoned"] += self._tombstones() > before
        SEEN["leaf evicted by the state walk"] += how == "evict" and full == 0 and out[0] > 0
        SEEN["evict_for_alloc freed a state"] += how == "evict_for_alloc" and out[1] > 0
        return out

    def evict(self, full: int, mamba: int) -> tuple[int, int]:
        return self._noting_evict("evict", full, mamba)

    def evict_for_alloc(self, full: int, mamba: int) -> tuple[int, int]:
        return self._noting_evict("evict_for_alloc", full, mamba)

    def insert(self, tokens: list[int], kv: list[int], state: int,
               prev: int = 0) -> tuple[int, bool, list[int]]:
        out = super().insert(tokens, kv, state, prev)
        SEEN["mamba_exist"] += out[1]
        SEEN["checkpoint"] += prev > 0
        return out


def _compare(area: str, seeds: range, core: str | None) -> None:
    compare.compare_seeds(
        area, seeds, D.random_case,
        lambda c: D.run(c, mamba_tree_sglang.SglangMambaTree(*_args(c), core=core)),
        lambda c: D.run(c, _Noting(*_args(c))))


@pytest.mark.parametrize("block", range(RANDOM_CASES // BLOCK))
def test_random_cases(block: int) -> None:
    _compare("mamba radix tree", range(block * BLOCK, (block + 1) * BLOCK), None)


def test_random_cases_python_tree_core() -> None:
    _compare("mamba radix tree (Python core)",
             range(PYTHON_CORE_SEED0, PYTHON_CORE_SEED0 + PYTHON_CORE_CASES), "python")


def test_random_cases_exercised_the_tree() -> None:
    """The cases above cut matches short at missing states, tombstoned states, evicted leaves
    from the state side, met existing states on insert and inserted with prev_prefix_len."""
    if sum(SEEN.values()) == 0:
        pytest.skip("run with the random cases")
    short = {k: (SEEN[k], n) for k, n in COVERAGE.items() if SEEN[k] < n}
    assert not short, f"cases that exercised each (seen, wanted): {short}"


T = list(range(100, 300))


def _directed(p: int, steps: list, pages: int = 40, slots: int = 6) -> list[dict]:
    case = {"page_size": p, "pool_tokens": pages * p, "slots": slots, "steps": steps}
    theirs = D.run(case, mamba_tree_sglang.SglangMambaTree(*_args(case)))
    ours = D.run(case, D.PagedkvMambaTree(*_args(case)))
    compare.same("mamba radix tree (directed)", theirs, ours,
                 compare.first_difference(theirs, ours))
    return theirs


@pytest.mark.parametrize("p", (1, 4, 16))
def test_a_match_ends_at_the_deepest_node_with_a_state(p: int) -> None:
    """Two keys, one the other's prefix, each with a state; the inner state tombstoned while
    a lock holds the leaf: a match of the short key (or between the two) finds nothing, the
    long key all of it."""
    r = _directed(p, [("insert", T[:2 * p]), ("insert", T[:4 * p]), ("lock", 1, T[:4 * p]),
                      ("evict", 0, 5), ("match", T[:2 * p]), ("match", T[:3 * p]),
                      ("match", T[:4 * p]), ("unlock", 1)])
    assert r[3]["out"] == [0, 1]  # one state tombstoned, no KV freed
    assert [x["out"][0] for x in r[4:7]] == [0, 0, 4 * p]


def test_a_walk_past_a_grid_point_reports_where_to_branch() -> None:
    """A 130-token key with a state at its end; a key that leaves it after 100 tokens walks
    100 tokens of KV, matches none (the split node has no state) and branches at 64."""
    r = _directed(1, [("insert", T[:130]), ("match", [*T[:100], 7, 7])], pages=200)
    assert r[1]["out"][0] == 0 and r[1]["out"][2] == 64


def test_the_state_walk_deletes_a_leaf_whole_and_tombstones_an_inner_node() -> None:
    """Least recent first: the inner node's state goes alone (its KV stays), the leaf goes
    whole (KV and state)."""
    r = _directed(4, [("insert", T[:8]), ("insert", T[:16]), ("match", T[:16]),
                      ("evict", 0, 1), ("evict", 0, 1)])
    assert [x["out"] for x in r[3:]] == [[0, 1], [8, 1]]


def test_evict_for_alloc_stops_at_the_state_target() -> None:
    """Every slot held (3 by the tree, 3 outside): one slot short frees one state."""
    r = _directed(1, [("insert", T[:5]), ("insert", T[10:15]), ("insert", T[20:25]),
                      ("hold", 3), ("room", 0, 1)], slots=6)
    assert r[4]["out"] == [5, 1]
