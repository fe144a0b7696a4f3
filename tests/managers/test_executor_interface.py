"""The scheduler's side of the executor interface, with a fake executor that samples tokens.

A real model reads, for each pass, the rows of ``req_to_token`` and the slots of the new
tokens; it returns one token per sampling request. These tests check what the scheduler
hands over (the page table, slots that match the table, the right token positions) and what
it does with the tokens (appends them, stops at EOS or ``max_new_tokens``), without a model.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

from pagedkv.managers import Scheduler, SchedulerConfig
from pagedkv.managers.req import Req
from pagedkv.model_executor.forward_batch_info import ForwardBatch, ForwardResult

VOCAB = 50


@dataclass(frozen=True)
class Spec:
    """A request for a token-producing executor: no ``output_len``, an empty output."""

    prompt_len: int
    max_new_tokens: int
    input_ids: tuple[int, ...]
    output_len: int | None = None
    output_ids: tuple[int, ...] = ()
    arrival_s: float = 0.0
    ignore_eos: bool = False


def next_token(tokens: np.ndarray) -> int:
    """The fake model: the next token is a function of the whole sequence so far."""
    return int((tokens.sum() * 7 + len(tokens)) % VOCAB)


@dataclass
class FakeModel:
    """Checks every batch against the page table, then "samples" :func:`next_token`."""

    eos_token_ids: tuple[int, ...] = ()
    batches: list[ForwardBatch] = field(default_factory=list)
    predicts_step_times = False

    def forward(self, batch: ForwardBatch) -> ForwardResult:
        assert batch.req_to_token_pool is not None
        table = batch.req_to_token_pool.req_to_token.numpy()
        self.batches.append(batch)
        out = np.full(len(batch.reqs), -1, dtype=np.int64)
        start = 0
        for i, req in enumerate(batch.reqs):
            prefix, ext = int(batch.prefix_lens[i]), int(batch.extend_lens[i])
            row = table[batch.req_pool_indices[i]]
            # the new tokens' slots are the row's entries at their positions
            assert (row[prefix:prefix + ext] == batch.out_cache_loc[start:start + ext]).all()
            start += ext
            seq = req.token_ids(prefix + ext)
            if batch.mode == "decode":  # the newest sampled token is the one computed now
                known = req.prompt_len + len(req.output_ids)
                assert ext == 1 and prefix in (known - 1, known)
                if prefix == known:  # overlap: its token is in flight, handed over apart
                    assert batch.input_ids is not None
                    seq = np.append(req.token_ids(known), batch.input_ids[i])
                elif batch.input_ids is not None:
                    assert batch.input_ids[i] == req.output_ids[-1]
            if batch.sample[i]:
                out[i] = next_token(seq)
        return ForwardResult(0.001, out)


def expected(spec: Spec, eos: tuple[int, ...] = ()) -> list[int]:
    """What the fake model generates for ``spec`` alone."""
    seq, out = list(spec.input_ids), []
    while len(out) < spec.max_new_tokens:
        tok = next_token(np.asarray(seq))
        out.append(tok)
        seq.append(tok)
        if tok in eos and not spec.ignore_eos:
            break
    return out


def specs(n: int, seed: int, shared: int = 0, max_new: int = 12) -> list[Spec]:
    rng = np.random.default_rng(seed)
    head = tuple(int(x) for x in rng.integers(0, VOCAB, shared))
    out = []
    for _ in range(n):
        tail = tuple(int(x) for x in rng.integers(0, VOCAB, int(rng.integers(3, 20))))
        ids = head + tail
        out.append(Spec(len(ids), max_new, ids))  # no EOS: each runs to max_new_tokens
    return out


def run(reqs: list[Spec], model: FakeModel, **kw: object) -> Scheduler:
    sched = Scheduler(reqs, executor=model, **kw)
    while sched.step():
        sched.check_invariants()
    return sched


@pytest.mark.parametrize("disable_overlap_schedule", [False, True])
def test_tokens_follow_the_sequence_through_chunks_retraction_and_prefix_hits(
        disable_overlap_schedule: bool) -> None:
    reqs = specs(8, seed=0, shared=8)
    model = FakeModel()
    cfg = SchedulerConfig(chunked_prefill_size=8, schedule_conservativeness=0.05,
                          disable_overlap_schedule=disable_overlap_schedule)
    sched = run(reqs, model, max_total_num_tokens=96, page_size=4, config=cfg)
    assert not sched.fast_forward and sched.real_tokens
    for req, spec in zip(sched.reqs, reqs, strict=True):
        assert req.output_ids == expected(spec)
    kinds = {e.kind for e in sched.trace.events}
    assert {"chunk", "retract", "reprefill"} <= kinds
    assert sum(r.cached_tokens for r in sched.reqs) > 0


def test_eos_stops_a_request_unless_it_ignores_eos() -> None:
    base = specs(3, seed=1)
    eos_tok = expected(base[0])[2]  # request 0's third token
    reqs = [Spec(s.prompt_len, s.max_new_tokens, s.input_ids, ignore_eos=(i == 2))
            for i, s in enumerate(base)]
    model = FakeModel(eos_token_ids=(eos_tok,))
    sched = run(reqs, model, max_total_num_tokens=256)
    for req, spec in zip(sched.reqs, reqs, strict=True):
        assert req.output_ids == expected(spec, (eos_tok,))
    assert sched.reqs[0].finish_reason == "stop" and len(sched.reqs[0].output_ids) == 3


def test_a_request_without_output_len() -> None:
    req = Req.from_spec(0, Spec(3, 5, (1, 2, 3)))
    assert req.output_len is None and req.output_ids == [] and req.should_stop() == ""
