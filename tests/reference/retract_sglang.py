"""SGLang's running ``ScheduleBatch`` over a :class:`life_sglang.SglangLife` state, for
:func:`drive_retract.run`.

The batch is SGLang's own class holding what its decode path reads: the requests, the pools,
the tree cache, the per-request row indices and sequence lengths (``filter_batch`` keeps
them in step with the requests). The model and sampling parts are stand-ins: nothing on the
memory path reads them, except ``filter_batch``, which tells the sampling info to filter too.
"""

from __future__ import annotations

import sgl_objects as sg
import torch
from drive_life import build_state, setup
from life_sglang import SglangLife


class _ModelConfig:
    is_encoder_decoder = False


class _SamplingInfo:
    def filter_batch(self, keep_indices: object, keep_indices_device: object) -> None:
        pass


class SglangRetract:
    """A real ``ScheduleBatch`` of the case's running requests, in order."""

    def __init__(self, case: dict) -> None:
        self.side = setup(case, SglangLife, case["radix"])
        build_state(case, self.side)
        reqs = [self.side.reqs[r] for r in case["running"]]
        rows = torch.tensor([sg.kv(r).req_pool_idx for r in reqs], dtype=torch.int64)
        seq = torch.tensor([sg.kv(r).kv_committed_len for r in reqs], dtype=torch.int64)
        fields = dict(reqs=reqs, req_to_token_pool=self.side.pool,
                      token_to_kv_pool_allocator=self.side.alloc, tree_cache=self.side.tree,
                      device="cpu", model_config=_ModelConfig(), sampling_info=_SamplingInfo(),
                      spec_algorithm=sg.SpeculativeAlgorithm.NONE, req_pool_indices=rows,
                      seq_lens=seq, seq_lens_cpu=seq.clone(), orig_seq_lens=seq.to(torch.int32))
        if sg.OLD:
            fields["output_ids"] = torch.tensor([r.output_ids[-1] for r in reqs], dtype=torch.int64)
        else:
            fields["req_pool_indices_cpu"] = rows.clone()
        self.batch = sg.ScheduleBatch(**fields)

    def need(self) -> int:
        return int(self.batch.new_tokens_required_next_decode())

    def check(self) -> bool:
        return bool(self.batch.check_decode_mem())

    def retract(self) -> tuple[list[str], float | None, list[str], bool]:
        """(victims, new ratio, aborted, raised)."""
        try:
            if sg.OLD:
                victims, ratio, aborted = self.batch.retract_decode(self.side.server_args)
            else:
                victims, ratio, aborted = self.batch.retract_decode()
        except ValueError:
            return [], None, [], True
        return [r.rid for r in victims], ratio, [r.rid for r in aborted], False

    def kept(self) -> list[str]:
        return [r.rid for r in self.batch.reqs]
