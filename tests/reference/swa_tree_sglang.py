"""SGLang 0.5.23's sliding-window radix tree behind :func:`drive_swa_tree.run`'s interface."""

from __future__ import annotations

from typing import Any

import sgl_objects as sg
import torch


class SglangSWATree:
    """``UnifiedRadixCache`` with components ``(FULL, SWA)`` over a real
    ``SWATokenToKVPoolAllocator``, its default (Rust) tree core or, with
    ``core="python"``, the Python one."""

    def __init__(self, page_size: int, full_tokens: int, swa_tokens: int, window: int,
                 core: str | None = None) -> None:
        sg.configure(page_size, radix=True)
        self.p = page_size
        self.alloc = sg.swa_allocator(page_size, full_tokens, swa_tokens)
        self.tree = sg.swa_tree_cache(sg.req_to_token_pool(4, 64), self.alloc, page_size,
                                      window, core)

    def take(self, n: int, pre: int = 0, last: int = -1) -> list[int] | None:
        if self.p == 1:
            out = self.alloc.alloc(n)
        else:
            z, s = torch.tensor([pre]), torch.tensor([pre + n])
            out = self.alloc.alloc_extend(z, z.clone(), s, s.clone(), torch.tensor([last]), n)
        return None if out is None else out.tolist()

    def insert_path(self, tokens: list[int], slots: list[int], evicted: int,
                    prev: int) -> tuple[int, list[int]]:
        params = sg.InsertParams(key=sg.key(tokens), value=torch.tensor(slots, dtype=torch.int64),
                                 prev_prefix_len=prev)
        params.set_evicted_seqlen(sg.ComponentType.SWA, evicted)
        result = self.tree.insert(params)
        return result.prefix_len, self.tree.path_device_indices(result.last_device_node).tolist()

    def release_swa(self, slots: list[int]) -> None:
        self.alloc.free_swa_segment(torch.tensor(slots, dtype=torch.int64), start_pos=0)

    def free(self, slots: list[int]) -> None:
        self.alloc.free(torch.tensor(slots, dtype=torch.int64))

    def insert(self, tokens: list[int], slots: list[int], evicted: int) -> int:
        params = sg.InsertParams(key=sg.key(tokens), value=torch.tensor(slots, dtype=torch.int64),
                                 prev_prefix_len=0)
        params.set_evicted_seqlen(sg.ComponentType.SWA, evicted)
        return self.tree.insert(params).prefix_len

    def match(self, tokens: list[int]) -> tuple[int, list[int], Any]:
        m = self.tree.match_prefix(sg.MatchPrefixParams(key=sg.key(tokens)))
        n = m.device_prefix_len
        return n, self.tree.path_device_indices(m.last_device_node)[:n].tolist(), m.last_device_node

    def lock(self, node: Any) -> Any:
        return self.tree.lock(node)

    def unlock(self, handle: Any) -> None:
        self.tree.unlock(handle)

    def evict(self, full: int, swa: int) -> tuple[int, int]:
        r = self.tree.evict(sg.EvictParams(num_tokens=full, swa_num_tokens=swa))
        return int(r.num_tokens_evicted), int(r.swa_num_tokens_evicted)

    def room(self, n: int) -> bool:
        return bool(self.alloc.check_decode_capacity(num_tokens=n, tree_cache=self.tree))

    sglang = True

    def budget(self) -> Any:
        """The prefill budget SGLang's ``PrefillAdder`` asks: the allocator's own
        ``create_prefill_budget(tree_cache)`` (an ``SWAPrefillBudget``)."""
        return self.alloc.create_prefill_budget(self.tree)

    def state(self) -> dict:
        t, a = self.tree, self.alloc
        return {"sizes": (int(t.full_evictable_size()), int(t.full_protected_size()),
                          int(t.swa_evictable_size()), int(t.swa_protected_size())),
                "available": (int(a.full_available_size()), int(a.swa_available_size())),
                "free_full": a.full_attn_allocator.free_pages.tolist(),
                "free_swa": a.swa_attn_allocator.free_pages.tolist()}
