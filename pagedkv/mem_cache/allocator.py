"""Token-to-KV-slot allocators: which physical KV slots hold which request's tokens.

Follows SGLang's ``python/sglang/srt/mem_cache/allocator.py``
(``TokenToKVPoolAllocator``, ``PagedTokenToKVPoolAllocator``). A *slot* is one token's
K/V row in every layer of :class:`pagedkv.mem_cache.memory_pool.MHATokenToKVPool`; a *page* is ``p``
consecutive slots, page ``k`` holding slots ``k*p .. k*p + p - 1``. Page 0 (slots
``0 .. p-1``) is never handed out: padded and dummy tokens write there.

Where we simplify: SGLang fills pages with the Triton kernels ``alloc_extend_kernel`` and
``alloc_decode_kernel`` on the GPU; we do the same arithmetic with vectorised numpy on the
CPU. We do not model free groups (``free_group_begin/end``) or the ``release_pages`` delay.
We add a per-slot ownership record so that misuse (double free, freeing slot 0, freeing
slots never handed out, a ``last_loc`` that points at somebody else's slot) raises
:class:`~pagedkv.errors.AllocatorError` instead of silently corrupting the cache.

Design for speed (a simulator calls these thousands of times on small inputs): the free
list and the ownership record are numpy arrays, and every check is a few whole-array numpy
operations; the exact error message is worked out only once a check has failed. The free
list lives in a buffer with room on both sides, so taking pages from the front and putting
them back at either end costs the pages moved, not the length of the list. Inputs may be
lists, numpy arrays or torch tensors; results are torch int64 tensors (sharing memory with
a numpy array, so ``.numpy()`` on them is free).
"""

from __future__ import annotations

import numpy as np
import torch

from pagedkv.errors import AllocatorError, OutOfMemoryError, bad_value, check_positive_int

NEVER, IN_USE, FREED = 0, 1, 2  # per-slot ownership states
IntsLike = torch.Tensor | np.ndarray | list[int]


def ceil_to_page(tokens: int | np.ndarray, page_size: int) -> int | np.ndarray:
    """``tokens`` rounded up to whole pages (SGLang's ``ceil_paged_tokens``); works on ints
    and on int64 arrays."""
    return -(-tokens // page_size) * page_size


def decode_need(kv_lens: IntsLike, page_size: int) -> int:
    """Slots the next decode step must find free: ``page_size`` per request whose ``kv_len``
    (tokens cached, = the position it writes next) is a multiple of ``page_size``, i.e. whose
    newest token starts a page; every request when ``page_size == 1``.

    Source: ``ScheduleBatch.new_tokens_required_next_decode`` / ``check_decode_mem``.
    """
    kv = _as_i64("kv_lens", kv_lens)
    return int(np.count_nonzero(kv % page_size == 0)) * page_size


def _as_i64(name: str, values: IntsLike) -> np.ndarray:
    """``values`` as a 1-D int64 numpy array; raise ``ConfigError`` on any other shape."""
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu().numpy()
    a = np.asarray(values, dtype=np.int64)
    if a.ndim != 1:
        raise bad_value(f"{name}.shape", tuple(a.shape), "a 1-D tensor")
    return a


class BaseTokenToKVPoolAllocator:
    """Free list of page ids plus the fill rules shared by every page size.

    Args:
        size: usable KV slots (SGLang's ``max_total_num_tokens``); must be a multiple
            of ``page_size``. The K/V buffers have ``size + page_size`` rows, page 0 extra.
        page_size: slots per page ``p`` (SGLang ``--page-size``).

    Attributes:
        free_pages: int64 ``[num_free]``, page ids in the order they will be handed out (a
            copy; assigning a tensor replaces the free list).
        slot_state: int8 ``[size + page_size]``: ``NEVER``, ``IN_USE`` or ``FREED`` (a
            tensor view of the numpy record ``_state``: writes through it are seen).
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
        self._set_free(_as_i64("free_pages", pages))

    @property
    def slot_state(self) -> torch.Tensor:
        return torch.from_numpy(self._state)

    def available_size(self) -> int:
        """Free slots, counted in whole pages: ``len(free_pages) * page_size``."""
        return (self._hi - self._lo) * self.page_size

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

    def _check_last_loc(self, lens: np.ndarray, last_loc: np.ndarray) -> np.ndarray:
        """For each request whose last page is partial, ``last_loc`` must be its last slot.

        Returns the bool mask of those requests (``lens % p != 0``)."""
        p = self.page_size
        if p == 1:  # no page is ever partial
            return np.zeros(len(lens), dtype=bool)
        partial = lens % p != 0
        if not partial.any():
            return partial
        loc, lens = last_loc[partial], lens[partial]
        if loc.min() < p or loc.max() >= len(self._state):
            raise bad_value("last_loc", loc.tolist(), f"slots in [{p}, "
                            f"{len(self._state)}) for requests with a partial last page")
        # the last token (position lens - 1) must sit at offset (lens - 1) % p of its page
        wrong = (self._state[loc] != IN_USE) | ((loc - lens + 1) % p != 0)
        if wrong.any():
            raise AllocatorError(
                f"last_loc {loc[wrong].tolist()} is not the in-use last slot of its request "
                f"(page_size={p}, lens {lens[wrong].tolist()})"
            )
        return partial

    def alloc_extend(
        self,
        prefix_lens: IntsLike,
        seq_lens: IntsLike,
        last_loc: IntsLike,
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
        ext = seq - pre
        if len(pre) and (pre.min() < 0 or ext.min() < 0):
            raise bad_value("(prefix_lens, seq_lens)", (pre.tolist(), seq.tolist()),
                            "0 <= prefix_len <= seq_len per request")
        total = int(ext.sum())
        if extend_num_tokens != total:
            raise bad_value("extend_num_tokens", extend_num_tokens,
                            f"sum(seq_lens - prefix_lens) = {total}")
        self._check_last_loc(pre, last)
        p = self.page_size
        pre_pages = (pre + p - 1) // p
        new_pages = (seq + p - 1) // p - pre_pages
        pages = self._take_pages(int(new_pages.sum()), f"alloc_extend({len(seq)} requests)",
                                 strict)
        if pages is None:
            return None
        # token j of request i (0 <= j < ext[i]): the first room[i] tokens fill the rest of
        # its partial page (last_loc + 1 + j); token room[i] + k goes to offset k % p of
        # its (k // p)-th new page, the request's new pages following those of requests < i
        room = np.minimum(seq, pre_pages * p) - pre
        req = np.repeat(np.arange(len(seq)), ext)
        j = np.arange(total) - np.repeat(np.cumsum(ext) - ext, ext)
        k = j - room[req]
        out = np.empty(total, dtype=np.int64)
        rest = k < 0
        out[rest] = last[req[rest]] + 1 + j[rest]
        fresh = ~rest
        first_page = np.cumsum(new_pages) - new_pages
        k = k[fresh]
        out[fresh] = pages[first_page[req[fresh]] + k // p] * p + k % p
        return self._hand_out(out, pages)

    def alloc_decode(
        self,
        seq_lens: IntsLike,
        last_loc: IntsLike,
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
        if len(seq) and seq.min() < 1:
            raise bad_value("seq_lens", seq.tolist(), "integers >= 1 (they include the new token)")
        boundary = ~self._check_last_loc(seq - 1, last)  # these start a new page
        pages = self._take_pages(int(np.count_nonzero(boundary)),
                                 f"alloc_decode({len(seq)} requests)", strict)
        if pages is None:
            return None
        out = last + 1
        out[boundary] = pages * self.page_size
        return self._hand_out(out, pages)

    # ----- free -------------------------------------------------------------------------
    def _release(self, pages: np.ndarray) -> None:
        """Put freed page ids back on the free list (order differs by subclass)."""
        raise NotImplementedError

    def free(self, free_index: IntsLike) -> None:
        """Free the pages that hold ``free_index`` (the slots of one or more requests).

        Raises :class:`AllocatorError` for slots out of range, in page 0, listed twice,
        freed already, never allocated, or when a page would be released while some of its
        in-use slots are not in ``free_index``.
        Source: ``TokenToKVPoolAllocator.free`` / ``PagedTokenToKVPoolAllocator.free``.
        """
        idx = _as_i64("free_index", free_index)
        if len(idx) == 0:
            return
        p, end = self.page_size, len(self._state)
        srt = np.sort(idx)
        if srt[0] < p or srt[-1] >= end:
            bad = (idx < 0) | (idx >= end)
            if bad.any():
                raise AllocatorError(f"cannot free slots {idx[bad].tolist()}: "
                                     f"outside the pool [0, {end})")
            raise AllocatorError(f"cannot free slots {idx[idx < p].tolist()}: page 0 "
                                 f"(slots 0..{p - 1}) is reserved for padded tokens")
        if (srt[1:] == srt[:-1]).any():
            raise AllocatorError("free_index lists a slot twice")
        state = self._state[idx]
        if (state != IN_USE).any():
            for code, why in ((FREED, "double free"), (NEVER, "never allocated")):
                if (state == code).any():
                    raise AllocatorError(f"cannot free slots {idx[state == code].tolist()}: "
                                         f"{why}")
        if p == 1:
            pages = idx
            self._state[idx] = FREED
        else:
            q = srt // p
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
        self._release(pages)

    # ----- checks -----------------------------------------------------------------------
    def check_invariants(self) -> None:
        """Raise :class:`AllocatorError` unless the free list and ownership agree.

        Checks: free page ids unique and in ``1 .. num_pages``; page 0 never in use; no free
        page holds an in-use slot; free pages + pages holding a token == ``num_pages``.
        """
        p, free = self.page_size, self._buf[self._lo:self._hi]
        if len(np.unique(free)) != len(free):
            raise AllocatorError("a page is on the free list twice")
        if len(free) and (free.min() < 1 or free.max() > self.num_pages):
            raise AllocatorError(f"free list holds page ids outside 1..{self.num_pages}")
        in_use = (self._state.reshape(-1, p) == IN_USE).any(axis=1)
        if in_use[0]:
            raise AllocatorError("page 0 is reserved but holds a token")
        if in_use[free].any():
            raise AllocatorError("a page on the free list holds an in-use slot")
        used = int(np.count_nonzero(in_use))
        if len(free) + used != self.num_pages:
            raise AllocatorError(f"free pages {len(free)} + used pages {used} "
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

    def _release(self, pages: np.ndarray) -> None:
        self._push(pages, front=False)


class PagedTokenToKVPoolAllocator(BaseTokenToKVPoolAllocator):
    """Page size ``p``: the free list holds page ids ``1 .. size // p``.

    ``free`` puts the freed pages (sorted, ``unique(slots // p)``) at the FRONT of the free
    list, so they are reused first. ``available_size()`` counts whole free pages only:
    empty slots in other requests' partial pages are not available.
    Source: ``mem_cache/allocator.py: PagedTokenToKVPoolAllocator``.
    """

    def _release(self, pages: np.ndarray) -> None:
        self._push(pages, front=True)
