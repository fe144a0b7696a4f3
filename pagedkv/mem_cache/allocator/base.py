"""The free list of KV pages, and the ownership record that catches misuse.

Follows SGLang's ``python/sglang/srt/mem_cache/allocator/base.py`` (0.5.23; in 0.5.9 the
whole allocator is one file, ``mem_cache/allocator.py``). A *slot* is one token's K/V row in
every layer of :class:`pagedkv.mem_cache.memory_pool.MHATokenToKVPool`; a *page* is ``p``
consecutive slots, page ``k`` holding slots ``k*p .. k*p + p - 1``. Page 0 (slots
``0 .. p-1``) is never handed out: padded and dummy tokens write there.

Freeing, in the two ways SGLang frees (both releases, page size ``p``):

- :meth:`~BaseTokenToKVPoolAllocator.free` takes slots. ``p == 1``: the slots go to the BACK
  of the free list in the order given. ``p > 1``: the pages holding them, sorted and
  de-duplicated (``torch.unique(slots // p)``), go to the FRONT, so they are reused first.
- :meth:`~BaseTokenToKVPoolAllocator.free_page_ids` takes page ids and puts them, in the
  order given, at the front (``p > 1``) or the back (``p == 1``). SGLang 0.5.23's caches free
  through it (``free_segment``: the first slot of each page of a request's row, divided by
  ``p``), so pages come back in the request's row order; 0.5.9 has only ``free``.
- Between :meth:`free_group_begin` and :meth:`free_group_end` frees are held back and
  released together: the slot frees as one ``free`` (one sorted block for ``p > 1``), then
  the page-id frees as one block in call order (which ends up in front of the first).

Where we simplify: no ``need_sort`` staging (SGLang sets it only under prefill/decode
disaggregation). We add a per-slot ownership record so that misuse (double free, freeing
page 0, a stale ``last_loc``) raises at once: :mod:`~pagedkv.mem_cache.allocator.ownership`.

Design for speed (a simulator calls these thousands of times on small inputs): the free
list lives in a buffer with room on both sides, so taking pages from the front and putting
them back at either end costs the pages moved, not the length of the list. Inputs may be
lists, numpy arrays or torch tensors; results are torch int64 tensors sharing memory with a
numpy array (``.numpy()`` on them is free).
"""

from __future__ import annotations

import numpy as np
import torch

from pagedkv.errors import AllocatorError, OutOfMemoryError, bad_value, check_positive_int
from pagedkv.mem_cache.allocator.ownership import (
    FREED,
    IN_USE,
    IntsLike,
    as_i64,
    check_free_list,
    check_free_page_ids,
    check_free_slots,
)


class BaseTokenToKVPoolAllocator:
    """Free list of page ids, the ownership record, ``alloc`` and the two kinds of free.

    Args:
        size: usable KV slots (SGLang's ``max_total_num_tokens``); must be a multiple
            of ``page_size``. The K/V buffers have ``size + page_size`` rows, page 0 extra.
        page_size: slots per page ``p`` (SGLang ``--page-size``).

    Attributes:
        free_pages: int64 ``[num_free]``, page ids in the order they will be handed out (a
            copy; assigning a tensor replaces the free list).
        slot_state: int8 ``[size + page_size]``: ``NEVER``, ``IN_USE`` or ``FREED`` (a
            tensor view of the numpy record: writes through it are seen).
    """

    def __init__(self, size: int, page_size: int) -> None:
        self.page_size = check_positive_int("page_size", page_size)
        self.size = check_positive_int("size", size, minimum=page_size)
        if size % page_size:
            raise bad_value("size", size, f"a multiple of page_size={page_size}")
        self.num_pages = size // page_size
        self.clear()

    def clear(self) -> None:
        """Return every page to the free list, pages ``1 .. num_pages`` in order."""
        self._set_free(np.arange(1, self.num_pages + 1, dtype=np.int64))
        self._state = np.zeros(self.size + self.page_size, dtype=np.int8)
        self._group: tuple[list[np.ndarray], list[np.ndarray]] | None = None

    # ----- the free list: _buf[_lo:_hi] -------------------------------------------------
    def _set_free(self, pages: np.ndarray, room: int = 0) -> None:
        """Make ``pages`` the free list, with at least ``max(room, num_pages)`` spare
        entries on each side of it."""
        room = max(room, self.num_pages)
        self._buf = np.empty(2 * room + len(pages), dtype=np.int64)
        self._lo, self._hi = room, room + len(pages)
        self._buf[self._lo:self._hi] = pages

    def _push(self, pages: np.ndarray, front: bool) -> None:
        """Put ``pages`` (in order) at the front or the back of the free list."""
        n = len(pages)
        if (self._lo if front else len(self._buf) - self._hi) < n:
            self._set_free(self._buf[self._lo:self._hi], room=n)
        if front:
            self._lo -= n
            self._buf[self._lo:self._lo + n] = pages
        else:
            self._buf[self._hi:self._hi + n] = pages
            self._hi += n

    @property
    def free_pages(self) -> torch.Tensor:
        return torch.from_numpy(self._buf[self._lo:self._hi].copy())

    @free_pages.setter
    def free_pages(self, pages: IntsLike) -> None:
        self._set_free(as_i64("free_pages", pages))

    @property
    def slot_state(self) -> torch.Tensor:
        return torch.from_numpy(self._state)

    def available_size(self) -> int:
        """Free slots, counted in whole pages: ``len(free_pages) * page_size``. Frees held
        in an open free group are not counted yet (as in SGLang)."""
        return (self._hi - self._lo) * self.page_size

    def full_available_size(self) -> int:
        """The full-attention pool's free slots: all of them (one pool). Source: SGLang
        0.5.23 ``BaseTokenToKVPoolAllocator.full_available_size``."""
        return self.available_size()

    def used_slots(self) -> int:
        """Slots that hold a request's token (IN_USE), partial-page tails excluded."""
        return int(np.count_nonzero(self._state == IN_USE))

    # ----- allocation -------------------------------------------------------------------
    def _take_pages(self, num: int, what: str, strict: bool) -> np.ndarray | None:
        """Pop ``num`` pages from the front of the free list, or None/raise if short."""
        free = self._hi - self._lo
        if num > free:
            if strict:
                p = self.page_size
                raise OutOfMemoryError(
                    f"{what} needs {num} new pages ({num * p} slots at page_size={p}); "
                    f"only {free} pages ({self.available_size()} slots) are free"
                )
            return None
        pages = self._buf[self._lo:self._lo + num].copy()
        self._lo += num
        return pages

    def _hand_out(self, slots: np.ndarray, pages: np.ndarray) -> torch.Tensor:
        """Mark ``slots`` IN_USE and return them; on a clash put ``pages`` back and raise."""
        clash = self._state[slots] == IN_USE
        if clash.any():
            self._push(pages, front=True)
            raise AllocatorError(f"slots {slots[clash].tolist()} are already in use "
                                 "(a stale last_loc?)")
        self._state[slots] = IN_USE
        return torch.from_numpy(slots)

    def alloc(self, need_size: int, strict: bool = False) -> torch.Tensor | None:
        """Take ``need_size`` slots as whole pages from the front of the free list.

        Returns int64 ``[need_size]`` slot ids, or None (nothing changed) when short;
        with ``strict=True`` raises :class:`OutOfMemoryError` instead. ``need_size`` must
        be a multiple of ``page_size`` (SGLang asserts the same).
        """
        check_positive_int("need_size", need_size, minimum=0)
        if need_size % self.page_size:
            raise bad_value("need_size", need_size, f"a multiple of page_size={self.page_size}")
        pages = self._take_pages(need_size // self.page_size, f"alloc({need_size})", strict)
        if pages is None:
            return None
        offsets = np.arange(self.page_size, dtype=np.int64)
        return self._hand_out((pages[:, None] * self.page_size + offsets).reshape(-1), pages)

    # ----- free -------------------------------------------------------------------------
    def _release(self, pages: np.ndarray) -> None:
        """Put freed page ids, in the order given, back on the free list: at the BACK for
        ``p == 1``, at the FRONT for ``p > 1`` (SGLang ``free`` / ``_release_page_ids``)."""
        self._push(pages, front=self.page_size > 1)

    def free(self, free_index: IntsLike) -> None:
        """Free the pages that hold ``free_index`` (the slots of one or more requests).

        ``p == 1``: the slots go to the back of the free list in the order given;
        ``p > 1``: their pages, sorted and de-duplicated, go to the front. Inside a free
        group the release waits for :meth:`free_group_end`.

        Raises :class:`AllocatorError` for slots out of range, in page 0, listed twice,
        freed already, never allocated, or when a page would be released while some of its
        in-use slots are not in ``free_index``.
        Source: ``TokenToKVPoolAllocator.free`` / ``PagedTokenToKVPoolAllocator.free``.
        """
        idx = as_i64("free_index", free_index)
        if len(idx) == 0:
            return
        check_free_slots(self._state, idx, self.page_size)
        p = self.page_size
        if p == 1:
            pages = idx
            self._state[idx] = FREED
        else:
            q = np.sort(idx) // p
            pages = q[np.concatenate(([True], q[1:] != q[:-1]))]
            by_page = self._state.reshape(-1, p)
            held = int(np.count_nonzero(by_page[pages] == IN_USE))
            if held != len(idx):
                raise AllocatorError(
                    f"freeing slots of pages {pages.tolist()} would also free "
                    f"{held - len(idx)} in-use slots not listed in free_index "
                    "(pages are freed whole)"
                )
            by_page[pages] = FREED
        if self._group is not None:
            self._group[0].append(pages)
        else:
            self._release(pages)

    def free_page_ids(self, page_ids: IntsLike) -> None:
        """Free exactly these pages, in this order (SGLang 0.5.23 ``free_page_ids``; for page
        size 1 ``TokenToKVPoolAllocator.free_page_ids`` is ``free``, also inside a group).

        Every page must hold at least one in-use slot; all its slots are released. Inside a
        free group the release waits for :meth:`free_group_end`.
        Raises :class:`AllocatorError` for a page out of ``1 .. num_pages``, listed twice or
        holding no token.
        """
        pages = as_i64("page_ids", page_ids)
        if len(pages) == 0:
            return
        check_free_page_ids(self._state, pages, self.page_size, self.num_pages)
        self._state.reshape(-1, self.page_size)[pages] = FREED
        if self._group is not None:
            # page size 1: page ids are slot ids and SGLang's token allocator frees them
            # with ``free``, so they keep their place among the group's other frees
            self._group[0 if self.page_size == 1 else 1].append(pages)
        else:
            self._release(pages)

    def free_segment(self, row_slots: IntsLike) -> None:
        """Free one request's row segment that starts on a page boundary: the pages of its
        first slot in every ``p``, in row order (SGLang 0.5.23 ``free_segment``)."""
        slots, p = as_i64("row_slots", row_slots), self.page_size
        # page size 1: the slots are the page ids (copied: a free group holds them till its end)
        self.free_page_ids(np.array(slots) if p == 1 else slots[::p] // p)

    def free_run(self, row_slots: IntsLike, free_order: str) -> None:
        """Free a run of a request's row the way a release's cache does: ``free_order``
        ``"sorted"`` calls :meth:`free` (0.5.9: each call's pages sorted), ``"row"``
        :meth:`free_segment` (0.5.23: pages in row order). Raises ConfigError for another
        order."""
        if free_order == "row":
            self.free_segment(row_slots)
        elif free_order == "sorted":
            self.free(row_slots)
        else:
            raise bad_value("free_order", free_order, '"sorted" or "row"')

    def free_group_begin(self) -> None:
        """Hold frees back until :meth:`free_group_end` (groups do not nest)."""
        if self._group is not None:
            raise AllocatorError("free groups cannot be nested")
        self._group = ([], [])

    def free_group_end(self) -> None:
        """Release the held frees: the slot frees as one ``free`` (``p > 1``: one sorted
        block), then the page-id frees as one block in call order (SGLang 0.5.23
        ``PagedTokenToKVPoolAllocator.free_group_end``). Page size 1: every free of the group
        goes to the back in call order (``TokenToKVPoolAllocator``)."""
        if self._group is None:
            raise AllocatorError("free_group_end without free_group_begin")
        plain, by_id = self._group
        self._group = None
        if plain:
            pages = np.concatenate(plain)
            self._release(pages if self.page_size == 1 else np.unique(pages))
        if by_id:
            self._release(np.concatenate(by_id))

    # ----- checks -----------------------------------------------------------------------
    def check_invariants(self) -> None:
        """Raise :class:`AllocatorError` unless the free list and ownership agree.

        Checks (outside a free group): free page ids unique and in ``1 .. num_pages``;
        page 0 never in use; no free page holds an in-use slot; free pages + pages holding
        a token == ``num_pages``.
        """
        if self._group is not None:
            raise AllocatorError("check_invariants inside an open free group")
        check_free_list(self._buf[self._lo:self._hi], self._state, self.page_size, self.num_pages)
