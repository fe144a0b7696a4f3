"""What the pool holds now, as the scheduler's logs, rows and admission read it.

Follows SGLang 0.5.23's ``managers/scheduler_components/pool_stats_observer.py``
(``SchedulerPoolStatsObserver``: ``#token`` and ``token usage``, evictable tokens counted as
free) and ``schedule_policy.py`` (``PrefillAdder``'s reservation for running requests,
:func:`~pagedkv.managers.schedule_policy.running_reservation`). ``tokens_used`` is pagedkv's
own (the trace's column).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from pagedkv.managers.config import SchedulerConfig
from pagedkv.managers.req import Req
from pagedkv.managers.schedule_batch import ScheduleBatch
from pagedkv.managers.schedule_policy import running_reservation
from pagedkv.managers.scheduler_components.new_token_ratio_tracker import NewTokenRatioTracker
from pagedkv.mem_cache.allocator import BaseTokenToKVPoolAllocator
from pagedkv.mem_cache.allocator.swa import SWATokenToKVPoolAllocator
from pagedkv.mem_cache.chunk_cache import ChunkCache
from pagedkv.mem_cache.radix_cache import RadixCache
from pagedkv.mem_cache.swa_cache import SWAPrefixCache


@dataclass(slots=True, kw_only=True)
class SchedulerPoolStatsObserver:
    """Reads the pool, the tree and a batch.

    Attributes:
        config: the admission policy and reservation constants.
        page_size, max_total_num_tokens: the pool's page size and slots.
        token_to_kv_pool_allocator, tree_cache: the pool and the tree.
        ratio_tracker: ``new_token_ratio`` (the reservation scales by it).
    """

    config: SchedulerConfig
    page_size: int
    max_total_num_tokens: int
    token_to_kv_pool_allocator: BaseTokenToKVPoolAllocator
    tree_cache: RadixCache | ChunkCache
    ratio_tracker: NewTokenRatioTracker

    def tokens_in_use(self) -> int:
        """SGLang's ``#token``: ``max_total - available - evictable`` (locked tree tokens and
        requests' own tokens; evictable cached tokens count as free)."""
        return (self.max_total_num_tokens - self.token_to_kv_pool_allocator.full_available_size()
                - self.tree_cache.evictable_size())

    def swa_tokens_in_use(self) -> int | None:
        """A sliding-window hybrid's SWA ``#token``: ``swa pool - swa available - swa
        evictable`` (0.5.23 ``_get_swa_token_info``); None with one pool."""
        alloc = self.token_to_kv_pool_allocator
        if not isinstance(alloc, SWATokenToKVPoolAllocator):
            return None
        tree = cast(SWAPrefixCache, self.tree_cache)
        return alloc.size_swa - alloc.swa_available_size() - tree.swa_evictable_size()

    def token_usage(self) -> float:
        """SGLang's ``token usage``: :meth:`tokens_in_use` over the pool."""
        return self.tokens_in_use() / self.max_total_num_tokens

    @staticmethod
    def tokens_used(running: ScheduleBatch, chunked_req: Req | None) -> int:
        """KV tokens the live requests hold (``running``'s and a request being chunked),
        shared prefixes counted once per request."""
        chunked = chunked_req.kv_committed_len if chunked_req is not None else 0
        return int(running.kv_len[~running.finished].sum()) + chunked

    def tokens_reserved(self, running: ScheduleBatch) -> float:
        """What admission holds back for ``running``'s live requests (``running_reservation``
        at the current ``new_token_ratio``)."""
        b = running
        cols = (b.prompt_len, b.max_new_tokens, b.generated, b.kv_len, b.ignore_eos)
        if b.finished.any():  # 0.5.9 keeps finished requests in the batch until the next step
            live = ~b.finished
            cols = tuple(c[live] for c in cols)
        return running_reservation(self.config, self.page_size, self.ratio_tracker.current, *cols)
