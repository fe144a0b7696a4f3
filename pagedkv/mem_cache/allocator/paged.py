"""Allocation of slots for extends (prefill) and decodes, page by page.

Follows SGLang's ``python/sglang/srt/mem_cache/allocator/paged.py`` (0.5.23) and
``mem_cache/allocator.py`` (0.5.9): ``PagedTokenToKVPoolAllocator.alloc_extend`` and
``alloc_decode``, which SGLang runs as the Triton kernels ``alloc_extend_kernel`` and
``alloc_decode_kernel`` on the GPU. We do the same arithmetic with vectorised numpy; the
reference tests run SGLang's own kernels (on the CPU, through Triton's interpreter) on the
same inputs and require the same slots.

A request's new tokens go, in order, to (1) the rest of its partially filled last page (the
slots after ``last_loc``), (2) whole new pages, (3) one new partial page. Pages come from the
front of the free list, request after request. Partial pages belong to their request: only
its own next tokens fill them.
"""

from __future__ import annotations

import numpy as np
import torch

from pagedkv.errors import AllocatorError, bad_value
from pagedkv.mem_cache.allocator.base import BaseTokenToKVPoolAllocator
from pagedkv.mem_cache.allocator.ownership import IN_USE, IntsLike, as_i64


class PagedTokenToKVPoolAllocator(BaseTokenToKVPoolAllocator):
    """Page size ``p``: the free list holds page ids ``1 .. size // p``.

    ``available_size()`` counts whole free pages only: empty slots in other requests'
    partial pages are not available. Freed pages go to the FRONT of the free list
    (``free``: sorted; ``free_page_ids``: in the order given), so they are reused first.
    Source: ``mem_cache/allocator/paged.py: PagedTokenToKVPoolAllocator`` (0.5.23).
    """

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
        pre, seq = as_i64("prefix_lens", prefix_lens), as_i64("seq_lens", seq_lens)
        last = as_i64("last_loc", last_loc)
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
        p = self.page_size
        if p == 1:  # every token is a new page, taken request after request
            pages = self._take_pages(total, f"alloc_extend({len(seq)} requests)", strict)
            return None if pages is None else self._hand_out(pages, pages)
        self._check_last_loc(pre, last)
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
        seq, last = as_i64("seq_lens", seq_lens), as_i64("last_loc", last_loc)
        if len(seq) != len(last):
            raise bad_value("len(seq_lens), len(last_loc)", (len(seq), len(last)),
                            "two equal lengths")
        if len(seq) and seq.min() < 1:
            raise bad_value("seq_lens", seq.tolist(), "integers >= 1 (they include the new token)")
        if self.page_size == 1:  # every token starts a new page
            pages = self._take_pages(len(seq), f"alloc_decode({len(seq)} requests)", strict)
            return None if pages is None else self._hand_out(pages, pages)
        boundary = ~self._check_last_loc(seq - 1, last)  # these start a new page
        pages = self._take_pages(int(np.count_nonzero(boundary)),
                                 f"alloc_decode({len(seq)} requests)", strict)
        if pages is None:
            return None
        out = last + 1
        out[boundary] = pages * self.page_size
        return self._hand_out(out, pages)

    def alloc_decode_steps(self, kv_lens: np.ndarray, last_loc: np.ndarray,
                           steps: int) -> np.ndarray | None:
        """The slots of ``steps`` successive decode steps with nothing freed in between,
        exactly as ``steps`` calls of :meth:`alloc_decode` hand them out.

        Step ``j`` writes position ``kv_lens + j`` of every request; one that crosses a page
        boundary there (``(kv_lens + j) % p == 0``; every request when ``p == 1``) takes the
        next page from the front of the free list, step after step and, within a step, in
        batch order. So new pages are taken in (step, request) order, and a request's other
        tokens fill its current page.

        Args:
            kv_lens: int64 ``[bs]`` tokens cached before the first step (each >= 1).
            last_loc: int64 ``[bs]`` slot of each request's last cached token.
            steps: decode steps, >= 1.

        Returns: int64 ``[bs, steps]`` slots (row ``i``: request ``i``'s positions
        ``kv_lens[i] .. kv_lens[i] + steps - 1``), or None (nothing changed) when short.
        Source: ``alloc_decode_kernel`` (``PagedTokenToKVPoolAllocator.alloc_decode``),
        ``steps`` times.
        """
        kv, last = as_i64("kv_lens", kv_lens), as_i64("last_loc", last_loc)
        if len(kv) != len(last) or (len(kv) and kv.min() < 1):
            raise bad_value("(kv_lens, last_loc)", (kv.tolist(), last.tolist()),
                            "two equal lengths, kv_lens >= 1")
        p = self.page_size
        self._check_last_loc(kv, last)
        pos = kv[None, :] + np.arange(steps, dtype=np.int64)[:, None]  # [steps, bs]
        fresh = pos % p == 0
        pages = self._take_pages(int(np.count_nonzero(fresh)), f"{steps} decode steps", False)
        if pages is None:
            return None
        if p == 1:  # every token is a new page: step-major, batch order
            out = pages.reshape(steps, len(kv)).T.copy()
        else:
            page = np.empty(pos.shape, dtype=np.int64)
            page[0] = last // p  # the partial page a request is filling (overwritten if fresh)
            page[fresh] = pages  # boolean assignment walks (step, request) in C order
            # the page a token goes to: the latest fresh page at or before its step
            since = np.where(fresh, np.arange(steps)[:, None], 0)
            np.maximum.accumulate(since, axis=0, out=since)
            page = np.take_along_axis(page, since, axis=0)
            out = (page * p + pos % p).T.copy()
        self._hand_out(out.reshape(-1), pages)
        return out
