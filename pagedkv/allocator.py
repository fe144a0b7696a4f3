"""Token-to-KV-slot allocators: which physical KV slots hold which request's tokens.

Follows SGLang's ``python/sglang/srt/mem_cache/allocator.py``
(``TokenToKVPoolAllocator``, ``PagedTokenToKVPoolAllocator``). A *slot* is one token's
K/V row in every layer of :class:`pagedkv.pools.MHATokenToKVPool`; a *page* is ``p``
consecutive slots, page ``k`` holding slots ``k*p .. k*p + p - 1``. Page 0 (slots
``0 .. p-1``) is never handed out: padded and dummy tokens write there.

Where we simplify: SGLang fills pages with the Triton kernels ``alloc_extend_kernel`` and
``alloc_decode_kernel`` on the GPU; we do the same arithmetic with torch on the CPU. We do
not model free groups (``free_group_begin/end``) or the ``release_pages`` delay. We add
a per-slot ownership record so that misuse (double free, freeing slot 0, freeing slots
never handed out, a ``last_loc`` that points at somebody else's slot) raises
:class:`~pagedkv.errors.AllocatorError` instead of silently corrupting the cache.
"""

from __future__ import annotations

import torch

from pagedkv.errors import AllocatorError, OutOfMemoryError, bad_value, check_positive_int

NEVER, IN_USE, FREED = 0, 1, 2  # per-slot ownership states
_I64 = torch.int64


def _as_i64(name: str, values: torch.Tensor | list[int]) -> torch.Tensor:
    """``values`` as a 1-D int64 CPU tensor; raise ``ConfigError`` on any other shape."""
    t = torch.as_tensor(values, dtype=_I64)
    if t.dim() != 1:
        raise bad_value(f"{name}.shape", tuple(t.shape), "a 1-D tensor")
    return t


class BaseTokenToKVPoolAllocator:
    """Free list of page ids plus the fill rules shared by every page size.

    Args:
        size: usable KV slots (SGLang's ``max_total_num_tokens``); must be a multiple
            of ``page_size``. The K/V buffers have ``size + page_size`` rows, page 0 extra.
        page_size: slots per page ``p`` (SGLang ``--page-size``).

    Attributes:
        free_pages: int64 ``[num_free]``, page ids in the order they will be handed out.
        slot_state: int8 ``[size + page_size]``: ``NEVER``, ``IN_USE`` or ``FREED``.
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
        self.free_pages = torch.arange(1, self.num_pages + 1, dtype=_I64)
        self.slot_state = torch.zeros(self.size + self.page_size, dtype=torch.int8)

    def available_size(self) -> int:
        """Free slots, counted in whole pages: ``len(free_pages) * page_size``."""
        return len(self.free_pages) * self.page_size

    def used_slots(self) -> int:
        """Slots that hold a request's token (IN_USE), partial-page tails excluded."""
        return int((self.slot_state == IN_USE).sum())

    # ----- allocation -------------------------------------------------------------------
    def _take_pages(self, num: int, what: str, strict: bool) -> torch.Tensor | None:
        """Pop ``num`` pages from the front of the free list, or None/raise if short."""
        if num > len(self.free_pages):
            if strict:
                p = self.page_size
                raise OutOfMemoryError(
                    f"{what} needs {num} new pages ({num * p} slots at page_size={p}); "
                    f"only {len(self.free_pages)} pages ({self.available_size()} slots) are free"
                )
            return None
        pages, self.free_pages = self.free_pages[:num], self.free_pages[num:]
        return pages

    def _hand_out(self, slots: torch.Tensor, pages: torch.Tensor) -> torch.Tensor:
        """Mark ``slots`` IN_USE and return them; on a clash put ``pages`` back and raise."""
        if bool((self.slot_state[slots] == IN_USE).any()):
            self.free_pages = torch.cat((pages, self.free_pages))
            taken = slots[self.slot_state[slots] == IN_USE].tolist()
            raise AllocatorError(f"slots {taken} are already in use (a stale last_loc?)")
        self.slot_state[slots] = IN_USE
        return slots

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
        offsets = torch.arange(self.page_size, dtype=_I64)
        return self._hand_out((pages[:, None] * self.page_size + offsets).reshape(-1), pages)

    def _check_last_loc(self, lens: torch.Tensor, last_loc: torch.Tensor) -> None:
        """For each request whose last page is partial, ``last_loc`` must be its last slot."""
        partial = lens % self.page_size != 0
        loc = last_loc[partial]
        if not bool(partial.any()):
            return
        if bool(((loc < self.page_size) | (loc >= len(self.slot_state))).any()):
            raise bad_value("last_loc", loc.tolist(), f"slots in [{self.page_size}, "
                            f"{len(self.slot_state)}) for requests with a partial last page")
        wrong = (self.slot_state[loc] != IN_USE) | (loc % self.page_size
                                                    != (lens[partial] - 1) % self.page_size)
        if bool(wrong.any()):
            raise AllocatorError(
                f"last_loc {loc[wrong].tolist()} is not the in-use last slot of its request "
                f"(page_size={self.page_size}, lens {lens[partial][wrong].tolist()})"
            )

    def alloc_extend(
        self,
        prefix_lens: torch.Tensor | list[int],
        seq_lens: torch.Tensor | list[int],
        last_loc: torch.Tensor | list[int],
        extend_num_tokens: int,
        strict: bool = False,
    ) -> torch.Tensor | None:
        """Slots for tokens ``prefix_len .. seq_len - 1`` of every request (prefill).

        Per request, in order: (1) the rest of its partially filled last page (the slots
        after ``last_loc``), (2) whole new pages, (3) one new partial page. New pages per
        request: ``ceil(seq_len/p) - ceil(prefix_len/p)``, taken from the front of the free
        list request by request. All-or-nothing: None (nothing changed) when short, or
        :class:`OutOfMemoryError` with ``strict=True``.

        Args:
            prefix_lens, seq_lens: int64 ``[bs]`` tokens already cached / cached after this.
            last_loc: int64 ``[bs]`` slot of each request's last cached token (-1 if none).
            extend_num_tokens: ``sum(seq_lens - prefix_lens)``.

        Returns: int64 ``[extend_num_tokens]`` slots, request after request.
        Source: ``PagedTokenToKVPoolAllocator.alloc_extend`` / ``alloc_extend_kernel``.
        """
        pre, seq = _as_i64("prefix_lens", prefix_lens), _as_i64("seq_lens", seq_lens)
        last = _as_i64("last_loc", last_loc)
        if not len(pre) == len(seq) == len(last):
            raise bad_value("len(prefix_lens), len(seq_lens), len(last_loc)",
                            (len(pre), len(seq), len(last)), "three equal lengths")
        if bool((pre < 0).any()) or bool((seq < pre).any()):
            raise bad_value("(prefix_lens, seq_lens)", (pre.tolist(), seq.tolist()),
                            "0 <= prefix_len <= seq_len per request")
        if extend_num_tokens != int((seq - pre).sum()):
            raise bad_value("extend_num_tokens", extend_num_tokens,
                            f"sum(seq_lens - prefix_lens) = {int((seq - pre).sum())}")
        self._check_last_loc(pre, last)
        p = self.page_size
        new_pages = (seq + p - 1) // p - (pre + p - 1) // p
        pages = self._take_pages(int(new_pages.sum()), f"alloc_extend({len(seq)} requests)",
                                 strict)
        if pages is None:
            return None
        parts, first = [], 0
        for i in range(len(seq)):
            n_pre, n_seq, n_new = int(pre[i]), int(seq[i]), int(new_pages[i])
            room = min(n_seq, (n_pre + p - 1) // p * p) - n_pre  # (1) rest of partial page
            if room > 0:
                parts.append(torch.arange(int(last[i]) + 1, int(last[i]) + 1 + room, dtype=_I64))
            mine = pages[first:first + n_new]  # (2) whole pages and (3) a partial page
            first += n_new
            fresh = (mine[:, None] * p + torch.arange(p, dtype=_I64)).reshape(-1)
            parts.append(fresh[: n_seq - n_pre - room])
        out = torch.cat(parts) if parts else torch.empty(0, dtype=_I64)
        return self._hand_out(out, pages)

    def alloc_decode(
        self,
        seq_lens: torch.Tensor | list[int],
        last_loc: torch.Tensor | list[int],
        strict: bool = False,
    ) -> torch.Tensor | None:
        """One slot per request for the token being decoded.

        ``seq_len`` includes the new token. A request gets a fresh page exactly when
        ``(seq_len - 1) % p == 0``; otherwise it gets ``last_loc + 1``, the next slot of
        its own partial page. All-or-nothing as in :meth:`alloc_extend`.

        Args:
            seq_lens: int64 ``[bs]``, each >= 1. last_loc: int64 ``[bs]`` slot of each
                request's previous token (-1 when ``seq_len == 1``).

        Returns: int64 ``[bs]`` slots.
        Source: ``PagedTokenToKVPoolAllocator.alloc_decode`` / ``alloc_decode_kernel``.
        """
        seq, last = _as_i64("seq_lens", seq_lens), _as_i64("last_loc", last_loc)
        if len(seq) != len(last):
            raise bad_value("len(seq_lens), len(last_loc)", (len(seq), len(last)),
                            "two equal lengths")
        if bool((seq < 1).any()):
            raise bad_value("seq_lens", seq.tolist(), "integers >= 1 (they include the new token)")
        self._check_last_loc(seq - 1, last)
        boundary = (seq - 1) % self.page_size == 0
        pages = self._take_pages(int(boundary.sum()), f"alloc_decode({len(seq)} requests)",
                                 strict)
        if pages is None:
            return None
        out = last + 1
        out[boundary] = pages * self.page_size
        return self._hand_out(out, pages)

    # ----- free -------------------------------------------------------------------------
    def _release(self, pages: torch.Tensor) -> None:
        """Put freed page ids back on the free list (order differs by subclass)."""
        raise NotImplementedError

    def free(self, free_index: torch.Tensor | list[int]) -> None:
        """Free the pages that hold ``free_index`` (a request's slots).

        Raises :class:`AllocatorError` for slots out of range, in page 0, listed twice,
        freed already, never allocated, or when a page would be released while some of its
        in-use slots are not in ``free_index``.
        Source: ``TokenToKVPoolAllocator.free`` / ``PagedTokenToKVPoolAllocator.free``.
        """
        idx = _as_i64("free_index", free_index)
        if idx.numel() == 0:
            return
        p, end = self.page_size, len(self.slot_state)
        if bool(((idx < 0) | (idx >= end)).any()):
            raise AllocatorError(f"cannot free slots {idx[(idx < 0) | (idx >= end)].tolist()}: "
                                 f"outside the pool [0, {end})")
        if bool((idx < p).any()):
            raise AllocatorError(f"cannot free slots {idx[idx < p].tolist()}: page 0 "
                                 f"(slots 0..{p - 1}) is reserved for padded tokens")
        if len(torch.unique(idx)) != len(idx):
            raise AllocatorError("free_index lists a slot twice")
        state = self.slot_state[idx]
        for code, why in ((FREED, "double free"), (NEVER, "never allocated")):
            if bool((state == code).any()):
                raise AllocatorError(f"cannot free slots {idx[state == code].tolist()}: {why}")
        pages = idx if p == 1 else torch.unique(idx // p)
        held = int((self.slot_state.view(-1, p)[pages] == IN_USE).sum())
        if held != len(idx):
            raise AllocatorError(
                f"freeing slots of pages {pages.tolist()} would also free {held - len(idx)} "
                "in-use slots not listed in free_index (pages are freed whole)"
            )
        self.slot_state.view(-1, p)[pages] = FREED
        self._release(pages)

    # ----- checks -----------------------------------------------------------------------
    def check_invariants(self) -> None:
        """Raise :class:`AllocatorError` unless the free list and ownership agree.

        Checks: free page ids unique and in ``1 .. num_pages``; page 0 never in use; no free
        page holds an in-use slot; free pages + pages holding a token == ``num_pages``.
        """
        p, free = self.page_size, self.free_pages
        if len(torch.unique(free)) != len(free):
            raise AllocatorError("a page is on the free list twice")
        if len(free) and (int(free.min()) < 1 or int(free.max()) > self.num_pages):
            raise AllocatorError(f"free list holds page ids outside 1..{self.num_pages}")
        in_use = (self.slot_state.view(-1, p) == IN_USE).any(dim=1)
        if bool(in_use[0]):
            raise AllocatorError("page 0 is reserved but holds a token")
        if bool(in_use[free].any()):
            raise AllocatorError("a page on the free list holds an in-use slot")
        if len(free) + int(in_use.sum()) != self.num_pages:
            raise AllocatorError(f"free pages {len(free)} + used pages {int(in_use.sum())} "
                                 f"!= {self.num_pages}")


class TokenToKVPoolAllocator(BaseTokenToKVPoolAllocator):
    """Page size 1: the free list holds slots ``1 .. size``.

    ``alloc`` takes from the front; ``free`` appends the freed slots at the BACK, in the
    order given. SGLang's scheduler calls ``alloc(n)`` for page size 1; ``alloc_extend`` and
    ``alloc_decode`` here give the same slots (every token starts a new page).
    Source: ``mem_cache/allocator.py: TokenToKVPoolAllocator``.
    """

    def __init__(self, size: int) -> None:
        super().__init__(size, 1)

    def _release(self, pages: torch.Tensor) -> None:
        self.free_pages = torch.cat((self.free_pages, pages))


class PagedTokenToKVPoolAllocator(BaseTokenToKVPoolAllocator):
    """Page size ``p``: the free list holds page ids ``1 .. size // p``.

    ``free`` puts the freed pages (sorted, ``unique(slots // p)``) at the FRONT of the free
    list, so they are reused first. ``available_size()`` counts whole free pages only:
    empty slots in other requests' partial pages are not available.
    Source: ``mem_cache/allocator.py: PagedTokenToKVPoolAllocator``.
    """

    def _release(self, pages: torch.Tensor) -> None:
        self.free_pages = torch.cat((pages, self.free_pages))
