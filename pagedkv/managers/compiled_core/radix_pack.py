"""The compiled core's radix cache, Python side: the requests' token ids and an empty array
tree packed for the loop, and the tree it leaves rebuilt as the reference's nodes.

The reference's tree is :class:`~pagedkv.mem_cache.radix_cache.RadixCache` (nodes are
:class:`~pagedkv.mem_cache.radix_node.TreeNode` objects); the compiled loop's is
:mod:`.radix`'s arrays.
"""

from __future__ import annotations

import heapq
import itertools
from typing import TYPE_CHECKING

import numpy as np

import pagedkv.managers.compiled_core.layout as L
import pagedkv.managers.compiled_core.radix as RX
from pagedkv.managers.req import Req
from pagedkv.mem_cache.radix_node import TreeNode, get_child_key

if TYPE_CHECKING:
    from pagedkv.managers.scheduler import Scheduler


def pack_tree(page_size: int, num_pages: int, total: int, longest: int, radix: bool
              ) -> RX.RadixArrays:
    """An empty array tree for a pool of ``num_pages`` pages (``total`` slots) whose longest
    request holds ``longest`` tokens (:func:`~.radix.new_tree`'s sizes, its key and value
    buffers twice the pool's slots: the tree holds up to the whole pool, and each compaction
    then makes room for a pool's worth of inserts); a minimal one, never used, with the
    radix cache off."""
    if not radix:
        return RX.new_tree(page_size, 2, 1)
    return RX.new_tree(page_size, num_pages + 2, 2 * total + longest)


def pack_token_ids(reqs: list[Req], R: np.ndarray) -> np.ndarray:
    """The requests' known token ids as one flat int64 array (each request's prompt ids,
    then its known output ids), their starts and counts in ``R``'s ``R_IDS_`` columns;
    requests without ids have none there (their made-up ids are computed)."""
    parts, at = [], 0
    for rid, r in enumerate(reqs):
        if r.input_ids is None and not r.output_ids:
            continue
        n_in = 0 if r.input_ids is None else len(r.input_ids)
        out = np.asarray(r.output_ids or [], dtype=np.int64)
        R[rid, L.R_IDS_AT], R[rid, L.R_IDS_IN], R[rid, L.R_IDS_OUT] = at, n_in, len(out)
        if n_in:
            parts.append(np.asarray(r.input_ids, dtype=np.int64))
        parts.append(out)
        at += n_in + len(out)
    return np.concatenate(parts) if parts else np.zeros(1, dtype=np.int64)


def unpack_tree(sched: Scheduler, s: L.State) -> None:
    """Rebuild the reference's tree from the array tree: the same nodes (ids, keys, slots,
    locks, access times, children in order), sizes, clock and ids, its LRU heap from the
    unlocked leaves; the ``last_node`` of each request holding a row (it holds a lock on it;
    a waiting request's match is made again before it is used)."""
    tree, t = sched.tree_cache, s.tree
    nd, T, p = t.nd, t.T, tree.page_size
    root = tree.root_node
    root.children = {}
    root.last_access_time = int(nd[RX.ROOT, RX.N_TIME])
    nodes, stack = {RX.ROOT: root}, [RX.ROOT]
    while stack:
        row = stack.pop()
        parent, child = nodes[row], int(nd[row, RX.N_FIRST])
        while child != RX.NONE:
            start, m = nd[child, RX.N_START], nd[child, RX.N_LEN]
            node = TreeNode(id=int(nd[child, RX.N_ID]), key=t.tok[start:start + m].copy(),
                            value=t.val[start:start + m].copy(), parent=parent,
                            lock_ref=int(nd[child, RX.N_LOCK]),
                            last_access_time=int(nd[child, RX.N_TIME]))
            parent.children[get_child_key(node.key, p)] = node
            nodes[child] = node
            stack.append(child)
            child = int(nd[child, RX.N_NEXT])
    tree.evictable_size_, tree.protected_size_ = int(T[RX.T_EVICTABLE]), int(T[RX.T_PROTECTED])
    tree.num_nodes, tree.evicted_tokens = int(T[RX.T_NNODES]), int(T[RX.T_EVICTED])
    tree._ids, tree._clock = itertools.count(int(T[RX.T_IDS])), itertools.count(int(T[RX.T_CLOCK]))
    tree.lru_heap = [(n.last_access_time, n.id, n) for n in nodes.values()
                     if n is not root and not n.children and n.lock_ref == 0]
    heapq.heapify(tree.lru_heap)
    for r in sched.reqs:
        row = int(s.R[r.rid, L.R_NODE])
        r.last_node = nodes[row] if row >= 0 and r.req_pool_idx >= 0 else None
