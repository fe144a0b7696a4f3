"""SGLang's allocator behind :func:`drive_alloc.run`'s interface."""

from __future__ import annotations

import sgl_objects as sg
import torch


class SglangPool:
    """SGLang's allocator behind the executor's interface."""

    def __init__(self, page_size: int, size: int, kernels: str) -> None:
        self.p = page_size
        self.a = sg.allocator(page_size, size, kernels)

    def alloc(self, n: int) -> list[int] | None:
        out = self.a.alloc(n)
        return None if out is None else out.tolist()

    def extend(self, pre: list[int], seq: list[int], last: list[int]) -> list[int] | None:
        total = sum(seq) - sum(pre)
        if self.p == 1:  # alloc_token_slots: one alloc for the batch
            return self.alloc(total)
        pre_t, seq_t = torch.tensor(pre), torch.tensor(seq)
        out = self.a.alloc_extend(pre_t, pre_t.clone(), seq_t, seq_t.clone(),
                                  torch.tensor(last), total)
        return None if out is None else out.tolist()

    def decode(self, seq: list[int], last: list[int]) -> list[int] | None:
        if self.p == 1:
            return self.alloc(len(seq))
        seq_t = torch.tensor(seq)
        out = self.a.alloc_decode(seq_t, seq_t.clone(), torch.tensor(last))
        return None if out is None else out.tolist()

    def free(self, slots: list[int], how: str, start: int) -> None:
        t = torch.tensor(slots, dtype=torch.int64)
        if how == "segment":
            self.a.free_segment(t, start_pos=start)
        else:
            self.a.free(t)

    def group(self, begin: bool) -> None:
        (self.a.free_group_begin if begin else self.a.free_group_end)()

    def state(self) -> tuple[int, list[int]]:
        return int(self.a.available_size()), self.a.free_pages.tolist()
