"""SGLang's ``SWATokenToKVPoolAllocator`` behind :func:`drive_swa_alloc.run`'s interface."""

from __future__ import annotations

import sgl_objects as sg
import torch


class SglangSWAPool:
    """SGLang 0.5.23's sliding-window allocator over a real ``SWAKVPool`` (one full and one
    window layer of one head of dimension 1, so its buffers are tiny), ``need_sort=False``."""

    def __init__(self, page_size: int, size: int, size_swa: int, kernels: str) -> None:
        self.p = page_size
        self.a = sg.swa_allocator(page_size, size, size_swa, kernels)

    @staticmethod
    def _out(t: torch.Tensor | None) -> list[int] | None:
        return None if t is None else t.tolist()

    def extend(self, pre: list[int], seq: list[int], last: list[int]) -> list[int] | None:
        total = sum(seq) - sum(pre)
        if self.p == 1:  # alloc_token_slots: one alloc for the batch
            return self._out(self.a.alloc(total))
        pre_t, seq_t = torch.tensor(pre), torch.tensor(seq)
        return self._out(self.a.alloc_extend(pre_t, pre_t.clone(), seq_t, seq_t.clone(),
                                             torch.tensor(last), total))

    def decode(self, seq: list[int], last: list[int]) -> list[int] | None:
        if self.p == 1:
            return self._out(self.a.alloc(len(seq)))
        seq_t = torch.tensor(seq)
        return self._out(self.a.alloc_decode(seq_t, seq_t.clone(), torch.tensor(last)))

    def call(self, method: str, slots: list[int], start: int) -> None:
        t = torch.tensor(slots, dtype=torch.int64)
        if method.endswith("segment"):
            getattr(self.a, method)(t, start_pos=start)
        else:
            getattr(self.a, method)(t)

    def group(self, begin: bool) -> None:
        (self.a.free_group_begin if begin else self.a.free_group_end)()

    def available(self) -> int:
        return int(self.a.available_size())

    def state(self) -> dict:
        return {"available": (int(self.a.full_available_size()), int(self.a.swa_available_size())),
                "free_full": self.a.full_attn_allocator.free_pages.tolist(),
                "free_swa": self.a.swa_attn_allocator.free_pages.tolist(),
                "mapping": self.a.full_to_swa_index_mapping.tolist()}
