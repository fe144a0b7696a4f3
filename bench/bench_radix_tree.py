"""The radix tree's cost per request: the Python tree (the reference) against the compiled
core's array tree, on one request stream with shared prefixes.

Run: ``python bench/bench_radix_tree.py [--requests N] [--page-size P] [--out FILE.json]``.
Each request of ``--requests`` (``GROUPS`` system prompts of ``SYSTEM`` tokens, each followed
by a request's own ``OWN`` tokens and ``OUT`` output tokens) does what a request's life does to
the tree with the radix cache on: a match of its prompt, a lock of the matched node, an insert
of prompt + output at finish, the unlock, and an eviction of LRU leaves whenever the tree
holds more than ``POOL`` slots. Slots are made-up ids (no allocator): this times the tree's
operations alone, CPU seconds on one core: the Python tree called from Python, the array tree
from a numba loop (as the compiled core would call it; compiled before timing). Both trees are
checked to end equal (sizes and node count).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numba
import numpy as np
from cpu_provenance import environment

from pagedkv.managers.compiled_core import radix as rx
from pagedkv.mem_cache.allocator import PagedTokenToKVPoolAllocator, TokenToKVPoolAllocator
from pagedkv.mem_cache.radix_tree import RadixTree

GROUPS, SYSTEM, OWN, OUT, POOL = 16, 512, 200, 200, 200_000


def stream(n: int, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """``n`` (prompt, prompt + output) token id arrays."""
    rng = np.random.default_rng(seed)
    systems = rng.integers(0, 32_000, size=(GROUPS, SYSTEM))
    out = []
    for i in range(n):
        own = rng.integers(0, 32_000, size=OWN + OUT)
        full = np.concatenate((systems[i % GROUPS], own)).astype(np.int64)
        out.append((full[:SYSTEM + OWN], full))
    return out


class Slots:
    """Made-up slot ids: a fresh run for every insert."""

    def __init__(self) -> None:
        self.next = 0

    def take(self, n: int) -> np.ndarray:
        self.next += n
        return np.arange(self.next - n, self.next, dtype=np.int64)


def run_python(reqs: list[tuple[np.ndarray, np.ndarray]], p: int) -> tuple[float, RadixTree]:
    alloc = TokenToKVPoolAllocator(8) if p == 1 else PagedTokenToKVPoolAllocator(8 * p, p)
    tree, slots = RadixTree(alloc), Slots()
    tree.evict = lambda n: _evict_python(tree, n)  # no allocator behind the made-up slots
    start = time.process_time()
    for prompt, full in reqs:
        node = tree.match_prefix(prompt).last_device_node
        tree.inc_lock_ref(node)
        tree.insert(full, slots.take(len(full)))
        tree.dec_lock_ref(node)
        if tree.total_size() > POOL:
            tree.evict(tree.total_size() - POOL)
    return time.process_time() - start, tree


def _evict_python(tree: RadixTree, n: int) -> int:
    from pagedkv.mem_cache import radix_eviction

    freed = 0
    while freed < n:
        leaf = radix_eviction.pop_lru_leaf(tree)
        if leaf is None:
            break
        freed += radix_eviction.evict_leaf(tree, leaf, free=False)
    return freed


@numba.njit
def replay(t, tokens, prompt_len: int, out, ends) -> None:
    """The request loop inside numba, as the compiled core would call the tree."""
    n, full = tokens.shape
    nxt = 0
    for i in range(n):
        key = tokens[i]
        node, _ = rx.match_prefix(t, key, prompt_len)
        rx.inc_lock_ref(t, node)
        rx.insert(t, key, np.arange(nxt, nxt + full), full)
        nxt += full
        rx.dec_lock_ref(t, node)
        held = t.T[rx.T_EVICTABLE] + t.T[rx.T_PROTECTED]
        if held > POOL:
            rx.evict(t, held - POOL, 0, False, out, ends)


def run_arrays(reqs: list[tuple[np.ndarray, np.ndarray]], p: int) -> tuple[float, rx.RadixArrays]:
    cap = 4 * POOL // p + 1024
    t = rx.new_tree(p, cap, 2 * POOL + 4 * (SYSTEM + OWN + OUT))
    out, ends = np.zeros(2 * POOL, dtype=np.int64), np.zeros(cap, dtype=np.int64)
    tokens = np.stack([full for _, full in reqs])
    start = time.process_time()
    replay(t, tokens, SYSTEM + OWN, out, ends)
    return time.process_time() - start, t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--page-size", type=int, default=1)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    env = environment()
    reqs = stream(args.requests)
    run_arrays(stream(50, seed=1), args.page_size)  # compile (or load numba's cache)
    py_s, tree = run_python(reqs, args.page_size)
    arr_s, t = run_arrays(reqs, args.page_size)
    same = (tree.evictable_size(), tree.protected_size(), tree.num_nodes) == (
        t.T[rx.T_EVICTABLE], t.T[rx.T_PROTECTED], t.T[rx.T_NNODES])
    n = args.requests
    results = {"requests": n, "page_size": args.page_size, "python_cpu_s": round(py_s, 3),
               "arrays_cpu_s": round(arr_s, 3), "python_us_per_request": round(1e6 * py_s / n, 1),
               "arrays_us_per_request": round(1e6 * arr_s / n, 1), "trees_equal": bool(same)}
    print(json.dumps(results, indent=1))
    if args.out:
        args.out.write_text(json.dumps({"benchmark": "bench/bench_radix_tree.py", **env,
                                        "results": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
