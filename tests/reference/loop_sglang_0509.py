"""SGLang 0.5.9's own ``Scheduler`` running its own event loop on a case (:mod:`drive_loop`).

The 0.5.9 counterpart of :mod:`loop_sglang` (0.5.23), with the same records. 0.5.9 is laid
out differently, so the stand-ins differ, and only those: the server arguments are a real
``ServerArgs`` holding its field defaults, set without ``__post_init__`` (which would read the
model's Hugging Face config) and published with ``set_global_server_args_for_scheduler``; the
model config is an attribute bag; the IPC channels are replaced by ``init_ipc_channels``
(which must set ``idle_sleeper``); the model worker through ``init_tp_model_worker`` (the
pools come from its ``get_memory_pool()``, the sizes from ``get_worker_info()``; the tree,
``RadixCache`` or ``ChunkCache``, is built by the scheduler's own
``init_cache_with_memory_pool``); the parallel-group getters are module functions
(``get_tp_group``, ...) answering a one-rank group, and ``create_scheduler_watchdog`` makes
no watchdog thread. Ingestion is the scheduler's own
``recv_requests`` method, replaced by the script; 0.5.9's loops have no exit flag
(``while True``), so the script ends a case by raising :class:`CaseDone`.
"""

from __future__ import annotations

import logging
from typing import Any

import sgl_boot

sgl_boot.load()

import sgl_objects as sg  # noqa: E402
import torch  # noqa: E402
from drive_loop import EOS, VOCAB, LoopCase, max_req_len, next_token  # noqa: E402
from sgl_loop_script import ScriptRecorder, note_batches, note_retractions  # noqa: E402
from sgl_standins import AttributeBag, OneRank, Retractions, Sink, field_defaults  # noqa: E402
from sglang.srt.environ import envs  # noqa: E402
from sglang.srt.managers import schedule_batch as sg_schedule_batch  # noqa: E402
from sglang.srt.managers import scheduler as sg_scheduler  # noqa: E402
from sglang.srt.managers.io_struct import TokenizedGenerateReqInput  # noqa: E402
from sglang.srt.managers.utils import GenerationBatchResult  # noqa: E402
from sglang.srt.sampling.sampling_params import SamplingParams  # noqa: E402
from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler  # noqa: E402

MAX_ITERATIONS = 5000
GROUP_GETTERS = ("get_tp_group", "get_attention_tp_group", "get_attention_cp_group",
                 "get_pp_group", "get_world_group")
# module functions replaced while the scheduler is built: the parallel groups answer one
# rank; no watchdog thread (after 300 s without a step it would SIGQUIT the parent process)
STAND_INS = {**{name: lambda *a, **k: OneRank() for name in GROUP_GETTERS},
             "create_scheduler_watchdog": lambda *a, **k: None}


class CaseDone(Exception):
    """Every request of the case has finished: the loop is left."""


def server_args(case: LoopCase) -> ServerArgs:
    """A real ``ServerArgs`` with its field defaults and the case's settings, published."""
    sa = field_defaults(ServerArgs)  # model_path, its one field without a default, is set below
    settings = dict(
        model_path="case", page_size=case.page_size, disable_radix_cache=not case.radix,
        chunked_prefill_size=case.chunked_prefill_size or -1,
        disable_overlap_schedule=not case.overlap, skip_tokenizer_init=True,
        schedule_policy="fcfs", schedule_conservativeness=case.schedule_conservativeness,
        max_prefill_tokens=case.max_prefill_tokens, device="cpu", attention_backend="triton",
        pp_max_micro_batch_size=None)
    for name, value in settings.items():
        setattr(sa, name, value)
    sg._active = sg._configured = None  # sgl_objects' stand-in is replaced
    set_global_server_args_for_scheduler(sa)
    return sa


def build(case: LoopCase) -> Any:
    """SGLang 0.5.9's ``Scheduler`` for ``case``, built by its own ``__init__``."""
    sa = server_args(case)
    model_config = AttributeBag(
        is_generation=True, is_multimodal=False, is_multimodal_gen=False,
        is_encoder_decoder=False, context_len=case.context_len, vocab_size=VOCAB,
        hf_eos_token_id={EOS}, hf_text_config=None,
        hf_config=AttributeBag(architectures=["LlamaForCausalLM"]))
    pool = sg.req_to_token_pool(case.max_running_requests, case.context_len + 8)
    alloc = sg.allocator(case.page_size, case.pool_tokens)
    prompt_len = {rid: len(r.prompt) for rid, r in enumerate(case.requests)}

    class Worker:
        is_hybrid_swa = False

        def __init__(self) -> None:
            self.model_runner = AttributeBag(hybrid_gdn_config=None, mamba2_config=None)
            self.model_config = model_config

        def get_worker_info(self) -> tuple:
            return (case.pool_tokens, case.max_prefill_tokens, case.max_running_requests, None,
                    max_req_len(case), max_req_len(case) - 5, 0, "cpu", torch.cpu.Stream(),
                    None, None, None)

        def get_memory_pool(self) -> tuple:
            return pool, alloc

        def get_pad_input_ids_func(self) -> None:
            return None

        def forward_batch_generation(self, batch: Any, **kwargs: Any) -> Any:
            seq = batch.seq_lens_cpu if batch.seq_lens_cpu is not None else batch.seq_lens
            rids = [int(r.rid) for r in batch.reqs]
            tokens = [next_token(case, rid, int(s) - prompt_len[rid])
                      for rid, s in zip(rids, seq.tolist(), strict=True)]
            return GenerationBatchResult(logits_output=AttributeBag(), can_run_cuda_graph=False,
                                         next_token_ids=torch.tensor(tokens, dtype=torch.int64))

    class CaseScheduler(sg_scheduler.Scheduler):
        def init_soft_watchdog(self, server_args: Any) -> None:
            self.soft_watchdog = None

        def init_model_config(self) -> None:
            self.model_config = model_config

        def init_ipc_channels(self, port_args: Any) -> None:
            self.idle_sleeper = None
            self.recv_from_tokenizer = self.recv_from_rpc = None
            self.send_to_tokenizer = self.send_to_detokenizer = Sink()

        def init_tp_model_worker(self) -> None:
            self.tp_worker = Worker()

    saved = {name: getattr(sg_scheduler, name) for name in STAND_INS}
    for name, fn in STAND_INS.items():
        setattr(sg_scheduler, name, fn)
    try:
        return CaseScheduler(sa, AttributeBag(nccl_port=0), gpu_id=0, tp_rank=0, moe_ep_rank=0,
                             pp_rank=0, attn_cp_rank=0, moe_dp_rank=0, dp_rank=None)
    finally:
        for name, fn in saved.items():
            setattr(sg_scheduler, name, fn)


def tokenized(rid: int, case: LoopCase) -> Any:
    """Request ``rid`` as the tokenizer manager sends it."""
    spec = case.requests[rid]
    params = SamplingParams(max_new_tokens=spec.max_new_tokens, ignore_eos=spec.ignore_eos)
    params.normalize(None)
    params.verify(VOCAB)
    return TokenizedGenerateReqInput(
        rid=str(rid), input_text=None, input_ids=list(spec.prompt), input_embeds=None,
        mm_inputs=None, sampling_params=params, return_logprob=False,
        logprob_start_len=-1, top_logprobs_num=0, token_ids_logprob=None, stream=False)


class ScriptReceiver(ScriptRecorder):
    """``recv_requests``: records the previous iteration, delivers arrivals, ends the case
    (0.5.9 never skips a decode step: ``skipped`` stays False)."""

    def __call__(self) -> list[Any]:
        if self.iterations:
            self.records.append(self.record())
        self.iterations += 1
        if self.iterations > MAX_ITERATIONS:
            raise RuntimeError(f"SGLang's loop ran {MAX_ITERATIONS} iterations: stuck")
        if len(self.finished) == len(self.case.requests):
            raise CaseDone
        return self.arrivals()

    def ratio(self) -> float:
        return float(self.sched.new_token_ratio)


def run(case: LoopCase) -> list[dict[str, Any]]:
    """One record per iteration of SGLang 0.5.9's loop on ``case``."""
    sched = build(case)
    log = Retractions()
    logger = logging.getLogger(sg_scheduler.__name__)
    logger.addHandler(log)
    receiver = ScriptReceiver(sched, case, log, tokenized)
    sched.recv_requests = receiver
    note_batches(sched, receiver)
    restore_retract = note_retractions(sg_schedule_batch.ScheduleBatch, receiver)
    try:
        with envs.SGLANG_DISABLE_CONSECUTIVE_PREFILL_OVERLAP.override(
                case.disable_consecutive_prefill_overlap):
            (sched.event_loop_overlap if case.overlap else sched.event_loop_normal)()
    except CaseDone:
        pass
    finally:
        restore_retract()
        logger.removeHandler(log)
    return receiver.records
