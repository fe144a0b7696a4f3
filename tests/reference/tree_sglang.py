"""SGLang's radix tree behind :func:`drive_tree.run`'s interface."""

from __future__ import annotations

from typing import Any

import sgl_objects as sg
import torch
from sglang.srt.mem_cache import common as sg_common


class SglangTree:
    """SGLang's tree and allocator, built as its scheduler builds them."""

    def __init__(self, page_size: int, pool_tokens: int) -> None:
        sg.configure(page_size, radix=True)
        self.alloc = sg.allocator(page_size, pool_tokens)
        self.tree = sg.tree_cache(sg.req_to_token_pool(4, 64), self.alloc, page_size)

    def take(self, n: int) -> list[int] | None:
        out = self.alloc.alloc(n)
        return None if out is None else out.tolist()

    def free(self, slots: list[int]) -> None:
        self.alloc.free(torch.tensor(slots, dtype=torch.int64))

    def insert(self, tokens: list[int], slots: list[int]) -> int:
        value = torch.tensor(slots, dtype=torch.int64)
        if sg.OLD:
            had = self.tree.insert(sg.InsertParams(key=sg.key(tokens), value=value)).prefix_len
            self.free(slots[:had])  # the caller frees what was cached already
            return had
        return self.tree.insert(sg.InsertParams(key=sg.key(tokens), value=value,
                                                prev_prefix_len=0)).prefix_len

    def match(self, tokens: list[int]) -> tuple[int, list[int], Any]:
        m = self.tree.match_prefix(sg.MatchPrefixParams(key=sg.key(tokens)))
        if sg.OLD:
            return len(m.device_indices), m.device_indices.tolist(), m.last_device_node
        n = m.device_prefix_len
        return n, self.tree.path_device_indices(m.last_device_node)[:n].tolist(), m.last_device_node

    def lock(self, node: Any) -> Any:
        if sg.OLD:
            self.tree.inc_lock_ref(node)
            return node
        return self.tree.lock(node)

    def unlock(self, handle: Any) -> None:
        (self.tree.dec_lock_ref if sg.OLD else self.tree.unlock)(handle)

    def evict(self, n: int) -> int:
        return int(self.tree.evict(sg.EvictParams(num_tokens=n)).num_tokens_evicted)

    def room(self, n: int) -> None:
        sg_common.evict_from_tree_cache(self.tree, n)

    def state(self) -> tuple[int, int, int, list[int]]:
        return (int(self.tree.evictable_size()), int(self.tree.protected_size()),
                int(self.alloc.available_size()), self.alloc.free_pages.tolist())
