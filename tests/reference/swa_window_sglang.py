"""SGLang 0.5.23's window release behind :func:`drive_swa_window.run`'s interface: its own
``free_swa_out_of_window_slots`` and ``free_kv_row_segments`` on real ``Req`` objects."""

from __future__ import annotations

import sgl_objects as sg
import torch
from sglang.srt.mem_cache import common as sg_common


class SglangWindow:
    """A real ``SWATokenToKVPoolAllocator``, ``ReqToTokenPool`` and one ``Req`` per request."""

    ROW_LEN = 2048

    def __init__(self, p: int, full: int, swa: int) -> None:
        sg.configure(p, radix=True)
        self.p = p
        self.a = sg.swa_allocator(p, full, swa)
        self.pool = sg.req_to_token_pool(4, self.ROW_LEN)
        self.reqs: dict = {}

    def extend(self, pre: int, n: int, last: int) -> list[int] | None:
        if self.p == 1:
            out = self.a.alloc(n)
        else:
            pre_t, seq_t = torch.tensor([pre]), torch.tensor([pre + n])
            out = self.a.alloc_extend(pre_t, pre_t.clone(), seq_t, seq_t.clone(),
                                      torch.tensor([last]), n)
        return None if out is None else out.tolist()

    def start(self, rid: str, cpl: int, floor: int) -> None:
        req = sg.request(rid, [1], 8)
        req.kv.req_pool_idx = int(rid[1:]) + 1  # one row per request name (row 0 is padding)
        req.kv.cache_protected_len = cpl
        req.kv.swa_evict_floor = floor
        self.reqs[rid] = req

    def _write(self, req, row: list[int]) -> None:
        self.pool.req_to_token[req.kv.req_pool_idx, :len(row)] = torch.tensor(row, dtype=torch.int32)

    def release(self, rid: str, row: list[int], pre_len: int, window: int, sharing: bool,
                retain: int | None, interval: int) -> int:
        req = self.reqs[rid]
        self._write(req, row)
        sg_common.free_swa_out_of_window_slots(
            req, pre_len, sliding_window_size=window, page_size=self.p,
            req_to_token_pool=self.pool, token_to_kv_pool_allocator=self.a,
            supports_prefix_sharing=sharing, retain_floor=retain, eviction_interval=interval)
        return int(req.kv.get_evicted_seqlen(sg.ComponentType.SWA))

    def finish(self, rid: str, row: list[int], ranges: list[tuple[int, int]]) -> None:
        req = self.reqs.pop(rid)
        self._write(req, row)
        r = self.pool.req_to_token[req.kv.req_pool_idx]
        sg_common.free_kv_row_segments(
            self.a, [(r[s:e].to(torch.int64), s) for s, e in sg_common.coalesce_ranges(ranges)],
            swa_evicted_seqlen=req.kv.get_evicted_seqlen(sg.ComponentType.SWA),
            swa_dead_lo=req.kv.swa_dead_lo(self.p))

    def state(self) -> dict:
        return {"available": (int(self.a.full_available_size()), int(self.a.swa_available_size())),
                "free_full": self.a.full_attn_allocator.free_pages.tolist(),
                "free_swa": self.a.swa_attn_allocator.free_pages.tolist(),
                "mapping": self.a.full_to_swa_index_mapping.tolist()}
