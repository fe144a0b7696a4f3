"""SGLang's ``PrefillAdder`` over a :class:`life_sglang.SglangLife` state, for
:func:`drive_adder.run` (which builds the state and runs the pass)."""

from __future__ import annotations

import sgl_objects as sg
from drive_life import build_state, setup
from life_sglang import SglangLife


class SglangAdder:
    """SGLang's ``PrefillAdder`` over a :class:`SglangLife` state."""

    def __init__(self, case: dict) -> None:
        self.side = setup(case, SglangLife, case["radix"])
        build_state(case, self.side)
        running = sg.ScheduleBatch(reqs=[self.side.reqs[r] for r in case["running"]])
        self.adder = sg.PrefillAdder(case["page_size"], self.side.tree, self.side.alloc, running,
                                     case["ratio"], case["max_prefill_tokens"], case["chunk"])
        self.has_chunked = bool(case["chunked"])

    def budgets(self) -> tuple[float, float, int, int | None]:
        a = self.adder
        return (float(a.rem_total_tokens), float(a.cur_rem_tokens), int(a.rem_input_tokens),
                a.rem_chunk_tokens)

    def stop_before_matching(self) -> bool:
        return not sg.OLD and self.adder.budget_state() == sg.AddReqResult.OTHER

    def offer(self, rid: str) -> tuple[int, str]:
        prefix = self.side.match(rid)
        result = self.adder.add_one_req(self.side.reqs[rid], has_chunked_req=self.has_chunked,
                                        truncation_align_size=None)
        return prefix, result.name

    def extend_len(self, rid: str) -> int:
        req = self.side.reqs[rid]
        return req.extend_input_len if sg.OLD else req.extend_end - req.prefix_len

    def outcome(self) -> tuple[list[str], str | None, tuple[int, int]]:
        a = self.adder
        return ([r.rid for r in a.can_run_list], a.new_chunked_req.rid if a.new_chunked_req else None,
                (a.log_hit_tokens, a.log_input_tokens))
