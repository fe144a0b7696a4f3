"""Cross-checks between the page table (:class:`ReqToTokenPool`) and an allocator.

SGLang keeps the two in step by construction (the scheduler writes every slot it gets from
the allocator into ``req_to_token`` and frees the row's slots when a request finishes);
these checks state that contract so tests and chapters can assert it after every step.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from pagedkv.errors import AllocatorError
from pagedkv.mem_cache.allocator import IN_USE, BaseTokenToKVPoolAllocator
from pagedkv.mem_cache.memory_pool import ReqToTokenPool


def check_pool_agreement(req_pool: ReqToTokenPool, allocator: BaseTokenToKVPoolAllocator,
                         seq_lens: Mapping[int, int]) -> None:
    """Raise :class:`AllocatorError` unless the live rows and the allocator agree.

    ``seq_lens`` maps each live request row to its cached length (SGLang keeps it on the
    ``Req``). Checks: every live row is allocated; its first ``seq_len`` entries are in-use
    slots; no slot appears in two rows; and the allocator has no in-use slot that no row
    owns (a leak).
    """
    req_pool.check_invariants()
    allocator.check_invariants()
    free_rows = set(req_pool.free_slots)
    table = req_pool.req_to_token.cpu().numpy()
    owned = []
    for row, n in seq_lens.items():
        if row in free_rows:
            raise AllocatorError(f"request row {row} holds {n} tokens but is on the free list")
        owned.append(table[row, :n])
    slots = np.concatenate(owned, dtype=np.int64) if owned else np.empty(0, dtype=np.int64)
    if len(np.unique(slots)) != len(slots):
        raise AllocatorError("a KV slot appears in two page-table entries")
    stray = allocator.slot_state.numpy()[slots] != IN_USE
    if stray.any():
        raise AllocatorError("the page table points at slots the allocator does not hold: "
                             f"{slots[stray].tolist()}")
    if allocator.used_slots() != len(slots):
        raise AllocatorError(f"the allocator holds {allocator.used_slots()} slots but the page "
                             f"table maps {len(slots)}: a leak")


def check_all_freed(req_pool: ReqToTokenPool, allocator: BaseTokenToKVPoolAllocator) -> None:
    """Raise :class:`AllocatorError` unless every row and every page is free again.

    With no live rows, :func:`check_pool_agreement` already demands that the allocator holds
    no slot, and its invariants then make every page free.
    """
    check_pool_agreement(req_pool, allocator, {})
    if req_pool.available_size() != req_pool.size:
        raise AllocatorError(f"{req_pool.size - req_pool.available_size()} request rows "
                             "are still allocated")
