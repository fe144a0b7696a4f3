"""SGLang 0.5.23's radix tree over state slots behind :func:`drive_mamba_tree.run`'s interface."""

from __future__ import annotations

from typing import Any

import mamba_sglang
import sgl_objects as sg
import torch
from sglang.srt.runtime_context import get_context


class SglangMambaTree:
    """``UnifiedRadixCache`` with components ``(FULL, MAMBA)``, enabled, as the default
    server builds it for Qwen3-Next (``enable_mamba_extra_buffer``: the ``extra_buffer``
    strategy, which also lifts the ``no_buffer`` strategy's page size 1), over a real token
    allocator and a real ``HybridReqToTokenPool``'s ``MambaSlotAllocator``; its default
    (Rust) tree core or, with ``core="python"``, the Python one. The server arguments (the
    page size and the Qwen3-Next preset, whose config the state component reads for its
    checkpoint grid) are published while the tree is built and taken down after."""

    def __init__(self, page_size: int, pool_tokens: int, slots: int,
                 core: str | None = None) -> None:
        if sg._active is not None:  # another module's arguments: taken down, and forgotten
            sg._active.restore()
            sg._active = sg._configured = None
        override = get_context().override_server_args(
            page_size=page_size, disable_radix_cache=False, device="cpu",
            model_path=mamba_sglang.qwen3_next_folder())
        override.install()
        try:
            self.p = page_size
            self.pool = mamba_sglang.hybrid_req_to_token_pool(4, slots, 64, False)
            self.slots = self.pool.mamba_allocator
            self.alloc = sg.allocator(page_size, pool_tokens)
            self.tree = sg.UnifiedRadixCache(sg.CacheInitParams(
                disable=False, req_to_token_pool=self.pool, token_to_kv_pool_allocator=self.alloc,
                page_size=page_size, tree_components=(sg.ComponentType.FULL, sg.ComponentType.MAMBA),
                eviction_policy="lru", enable_mamba_extra_buffer=True, tree_core_backend=core))
        finally:
            override.restore()

    def take(self, n: int) -> list[int] | None:
        out = self.alloc.alloc(n)
        return None if out is None else out.tolist()

    def free(self, slots: list[int]) -> None:
        self.alloc.free(torch.tensor(slots, dtype=torch.int64))

    def take_state(self) -> int | None:
        out = self.slots.alloc(1)
        return None if out is None else int(out[0])

    def free_state(self, slot: int) -> None:
        self.slots.free(torch.tensor([slot], dtype=torch.int64))

    def insert(self, tokens: list[int], kv: list[int], state: int,
               prev: int = 0) -> tuple[int, bool, list[int]]:
        r = self.tree.insert(sg.InsertParams(
            key=sg.key(tokens), value=torch.tensor(kv, dtype=torch.int64), prev_prefix_len=prev,
            mamba_value=torch.tensor([state], dtype=torch.int64)))
        return (r.prefix_len, bool(r.mamba_exist),
                self.tree.path_device_indices(r.last_device_node).tolist())

    def match(self, tokens: list[int]) -> tuple[list[Any], Any]:
        m = self.tree.match_prefix(sg.MatchPrefixParams(key=sg.key(tokens)))
        n = m.device_prefix_len
        slots = self.tree.path_device_indices(m.last_device_node)[:n].tolist()
        return [n, slots, m.mamba_branching_seqlen], m.last_device_node

    def lock(self, node: Any) -> Any:
        return self.tree.lock(node)

    def unlock(self, handle: Any) -> None:
        self.tree.unlock(handle)

    def evict(self, full: int, mamba: int) -> tuple[int, int]:
        r = self.tree.evict(sg.EvictParams(num_tokens=full, mamba_num=mamba))
        return int(r.num_tokens_evicted), int(r.mamba_num_evicted)

    def evict_for_alloc(self, full: int, mamba: int) -> tuple[int, int]:
        r = self.tree.evict_for_alloc(sg.EvictParams(num_tokens=full, mamba_num=mamba))
        return int(r.num_tokens_evicted), int(r.mamba_num_evicted)

    def state(self) -> dict:
        t = self.tree
        return {"sizes": (int(t.full_evictable_size()), int(t.full_protected_size()),
                          int(t.mamba_evictable_size()), int(t.mamba_protected_size())),
                "available": (int(self.alloc.available_size()), int(self.slots.available_size())),
                "free_kv": self.alloc.free_pages.tolist(),
                "free_states": [int(s) for s in self.slots.free_slots]}
