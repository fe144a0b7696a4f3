"""Page size 1: every token is its own page.

Follows SGLang's ``python/sglang/srt/mem_cache/allocator/token.py`` (0.5.23;
``mem_cache/allocator.py`` in 0.5.9): the free list holds slots ``1 .. size``, ``alloc``
takes from the front and every free appends the freed slots at the BACK, in the order
given (``free`` and ``free_page_ids`` alike, since page ids are slot ids here).
"""

from __future__ import annotations

from pagedkv.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator


class TokenToKVPoolAllocator(PagedTokenToKVPoolAllocator):
    """The page-size-1 allocator.

    SGLang's scheduler calls ``alloc(n)`` for page size 1; ``alloc_extend`` and
    ``alloc_decode`` here give the same slots, since every token starts a new page, so one
    code path serves both (SGLang keeps two classes; their results are the same).
    Source: ``mem_cache/allocator/token.py: TokenToKVPoolAllocator`` (0.5.23).
    """

    def __init__(self, size: int) -> None:
        super().__init__(size, 1)
