"""The radix tree's pieces: a node, what a match returns, and token keys cut to whole pages.

Follows SGLang's ``python/sglang/srt/mem_cache/radix_cache.py`` (0.5.9: ``TreeNode``,
``get_child_key``, ``_key_match_page_size1`` / ``_key_match_paged``, the page alignment of
``_page_align_keys``) and ``mem_cache/base_prefix_cache.py`` (``MatchResult``); 0.5.23's
tree core keys and matches the same way. Each node holds a run of token ids (``key``) and
the KV slots that hold those tokens' K/V (``value``, one slot per token); with ``page_size``
p > 1 keys are cut to whole pages, children are keyed by their first page of token ids and
matches advance a page at a time. The tree over them is
:class:`~pagedkv.mem_cache.radix_tree.RadixTree`.

Where we simplify: a key is an int64 array of token ids, without SGLang's ``RadixKey``
``extra_key`` namespace.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pagedkv.errors import bad_value
from pagedkv.mem_cache.allocator import IntsLike

EMPTY_SLOTS = np.empty(0, dtype=np.int64)


@dataclass(eq=False)
class TreeNode:
    """One edge of the tree and the node it leads to.

    Attributes:
        id: creation order (the root is 0); the tie-break of the eviction order.
        key: int64 ``[n]`` token ids on the edge into this node, ``n`` a multiple of p.
        value: int64 ``[n]`` KV slots of those tokens.
        parent: None for the root.
        children: child nodes keyed by their first token (first page, as bytes, for p > 1:
            :func:`get_child_key`).
        lock_ref: running requests whose locked path passes through this node.
        last_access_time: the tree's clock when a match or insert last walked it.
    """

    id: int
    key: np.ndarray = field(default_factory=lambda: EMPTY_SLOTS)
    value: np.ndarray = field(default_factory=lambda: EMPTY_SLOTS)
    parent: TreeNode | None = None
    children: dict[object, TreeNode] = field(default_factory=dict)
    lock_ref: int = 0
    last_access_time: int = 0

    def is_leaf(self) -> bool:
        return not self.children


@dataclass(frozen=True)
class MatchResult:
    """What a match found: the slots of the first ``n`` tokens (int64 ``[n]``) and the node
    the match ended on (the root when nothing matched); a sliding-window hybrid's tree also
    gives ``swa_branching_seqlen`` (SGLang 0.5.23's: the page-aligned full-KV hit when it
    reaches past the match the window allows, else None), a linear-attention hybrid's
    ``mamba_branching_seqlen`` (the full-KV hit rounded down to the state checkpoint grid,
    when that is past the match, else None; its node is a
    :class:`~pagedkv.mem_cache.mamba_radix_tree.MambaNode`)."""

    device_indices: np.ndarray
    last_device_node: TreeNode
    swa_branching_seqlen: int | None = None
    mamba_branching_seqlen: int | None = None


def page_aligned(key: IntsLike, page_size: int) -> np.ndarray:
    """``key`` as int64 token ids cut to whole pages of ``page_size``.

    Raises:
        ConfigError: ``key`` is not a 1-D sequence of integers.
    """
    if isinstance(key, np.ndarray) and key.dtype == np.int64 and key.ndim == 1:
        return key[:len(key) // page_size * page_size]  # the common case, fast
    if isinstance(key, (str, bytes)):
        raise bad_value("key", key, "a sequence of integer token ids")
    a = np.asarray(key)
    if a.ndim != 1 or (a.size and not np.issubdtype(a.dtype, np.integer)):
        raise bad_value("key", key if len(a) < 20 else f"{list(a[:20])}...",
                        "a 1-D sequence of integer token ids")
    a = a.astype(np.int64, copy=False)
    return a[:len(a) // page_size * page_size]


def get_child_key(key: np.ndarray, page_size: int) -> object:
    """What a child is filed under: its first token id, or its first page as bytes (p > 1).
    Source: ``get_child_key``."""
    return int(key[0]) if page_size == 1 else key[:page_size].tobytes()


def key_match(a: np.ndarray, b: np.ndarray, page_size: int) -> int:
    """Length of the common prefix of ``a`` and ``b``, in whole pages.
    Source: ``_key_match_page_size1`` / ``_key_match_paged``."""
    n = min(len(a), len(b))
    diff = a[:n] != b[:n]
    m = int(diff.argmax())  # the first mismatch, or 0 when there is none
    if not diff[m]:
        m = n
    return m // page_size * page_size


def descendants(root: Any) -> Iterator[Any]:
    """Every node below ``root`` (any node with ``children``), parents before children."""
    stack = list(root.children.values())
    while stack:
        node = stack.pop()
        yield node
        stack.extend(node.children.values())


def path_full(node: Any, root: Any) -> np.ndarray:
    """The full-attention slots (``node.full``) from below ``root`` down to ``node``, in
    path order, of a hybrid's tree (sliding-window or linear-attention)."""
    chunks = []
    while node is not root:
        chunks.append(node.full)
        node = node.parent
    return np.concatenate(chunks[::-1]) if chunks else EMPTY_SLOTS
