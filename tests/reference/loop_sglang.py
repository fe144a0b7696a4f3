"""SGLang 0.5.23's own ``Scheduler`` running its own event loop on a case (:mod:`drive_loop`).

The scheduler is built by its own ``__init__`` (server arguments, ``PrefillAdder``, the ratio
tracker, the waiting queue, the output processors); what a CPU cannot give it is replaced, and
only that: the model config (an attribute bag: reads of unknown fields answer None and are
recorded, :data:`UNKNOWN_READS`), the IPC channels, the watchdog, the parallel groups (one rank,
no collective; stamped for the case and taken down after it, so the process is left as it
was found), and the model worker (:class:`TableWorker`, which returns each request's next
token from the case's table and owns no weights). The pools are SGLang's own classes, built by
:mod:`sgl_objects` as ``build_kv_cache`` builds them (``need_sort=False``, the tree or the
disabled tree).

The loop is the real one: ``Scheduler.event_loop_normal`` or ``event_loop_overlap`` is called
and runs until the case is done. Only request ingestion is replaced: the scheduler's
``request_receiver`` becomes :class:`ScriptReceiver`, which, at the top of each iteration,
records the state the previous iteration left (one record per iteration) and hands over the
requests whose arrival time has come as real ``TokenizedGenerateReqInput`` s (they then go
through SGLang's own ``process_input_requests`` / ``handle_generate_request``). When every
request has finished it raises SGLang's exit flag (``gracefully_exit``); the loop then runs one
more, idle, iteration (whose ``on_idle`` checks SGLang's own memory invariants) and returns.
``run_batch`` is wrapped (the real one runs) to note the batch each iteration launches,
``update_running_batch`` to note a skipped decode step (it returns None only then), and
``ScheduleBatch.retract_decode`` to note its victims. With a linear-attention hybrid's radix
cache on (the ``extra_buffer`` strategy, which a published override leaves unresolved, so it is
passed), ``Tensor.pin_memory`` returns the tensor itself while the loop runs (a CPU has no
pinned memory; the decode step stages its state-tracking mask there).
"""

from __future__ import annotations

import logging
import os
from array import array
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import sgl_boot

sgl_boot.load()

import mamba_sglang  # noqa: E402
import sgl_objects as sg  # noqa: E402
import torch  # noqa: E402
from drive_loop import EOS, VOCAB, LoopCase, max_req_len, next_token  # noqa: E402
from sgl_loop_script import ScriptRecorder, note_batches, note_retractions  # noqa: E402
from sgl_standins import UNKNOWN_READS, AttributeBag, OneRank, Retractions, Sink  # noqa: E402
from sglang.srt.environ import envs  # noqa: E402
from sglang.srt.managers import schedule_batch as sg_schedule_batch  # noqa: E402
from sglang.srt.managers import scheduler as sg_scheduler  # noqa: E402
from sglang.srt.managers.io_struct import TokenizedGenerateReqInput  # noqa: E402
from sglang.srt.managers.utils import GenerationBatchResult  # noqa: E402
from sglang.srt.mem_cache import kv_cache_builder  # noqa: E402
from sglang.srt.runtime_context import _derived_widths, get_context, get_parallel  # noqa: E402
from sglang.srt.sampling.sampling_params import SamplingParams  # noqa: E402

MAX_ITERATIONS = 5000  # a case that runs longer is stuck: fail rather than spin
STUCK_IDLE = 20  # idle iterations with a queue, nothing running and nothing to arrive: stuck
ALLOWED_UNKNOWN = frozenset()


class TableWorker:
    """The model worker: each request's next token from the case's table, by the sequence
    length the batch gives it (output index ``seq_len - prompt_len``)."""

    def __init__(self, model_config: Any, token: Callable[[int, int], int],
                 prompt_len: Callable[[int], int]) -> None:
        self.model_config = model_config
        self.token, self.prompt_len = token, prompt_len
        self.model_runner = AttributeBag(
            attn_backend=None, canary_manager=None, prefill_aware_swa=False,
            token_to_kv_pool=AttributeBag(post_capture_active=False))
        self.last_shared_read_runner = None

    def forward_batch_generation(self, batch: Any, **kwargs: Any) -> Any:
        seq = batch.seq_lens_cpu if batch.seq_lens_cpu is not None else batch.seq_lens
        rids = [int(r.rid) for r in batch.reqs]
        tokens = [self.token(rid, int(s) - self.prompt_len(rid))
                  for rid, s in zip(rids, seq.tolist(), strict=True)]
        return GenerationBatchResult(logits_output=None, can_run_cuda_graph=False,
                                     next_token_ids=torch.tensor(tokens, dtype=torch.int64))

    def get_pad_input_ids_func(self) -> None:
        return None

    def set_hicache_consumer(self, *args: Any) -> None:
        pass



@contextmanager
def _env_overrides(*pairs: tuple[Any, Any]) -> Iterator[None]:
    """Set SGLang environment flags for one case and restore them however the case ends.

    SGLang's own ``EnvField.override`` restores only when its block exits normally; a case
    that ends by raising (SGLang's loop stopped when it would idle forever) would leave
    e.g. ``SGLANG_SWA_EVICTION_INTERVAL`` set for every later test in the process, where
    SGLang's request-capped SWA pool sizing reads it."""
    saved = [(env, os.environ.get(env.name), env._set_to_none) for env, _ in pairs]
    try:
        for env, value in pairs:
            env.set(value)
        yield
    finally:
        for env, old, set_to_none in saved:
            if old is None:
                os.environ.pop(env.name, None)
            else:
                os.environ[env.name] = old
            env._set_to_none = set_to_none

def _server_args(case: LoopCase) -> Any:
    """Publish the case's server arguments (a real ``ServerArgs``, through SGLang's
    ``override_server_args``, as :func:`sgl_objects.configure` does with two fields); return
    the override (``restore()`` it when done)."""
    if sg._active is not None:  # another module's arguments: taken down, and forgotten
        sg._active.restore()
        sg._active = sg._configured = None
    # a linear-attention hybrid: its mamba cache component reads the model's config
    # through model_path (the Qwen3-Next preset), and the sizing's slot count
    hybrid = ({} if case.mamba_slots is None else
              dict(model_path=mamba_sglang.qwen3_next_folder(),
                   max_mamba_cache_size=case.mamba_slots,
                   max_running_requests=case.max_running_requests,
                   # what a CUDA server resolves --mamba-radix-cache-strategy auto to
                   # (_mamba_radix_cache_resolution; a published override does not resolve it)
                   **({"mamba_radix_cache_strategy": "extra_buffer" if _extra_buffer(case)
                       else "no_buffer"} if case.radix else {})))
    return get_context().override_server_args(
        page_size=case.page_size, disable_radix_cache=not case.radix,
        chunked_prefill_size=case.chunked_prefill_size or -1,
        disable_overlap_schedule=not case.overlap, skip_tokenizer_init=True,
        schedule_policy="fcfs", schedule_conservativeness=case.schedule_conservativeness,
        device="cpu", attention_backend="triton", **hybrid)


def _extra_buffer(case: LoopCase) -> bool:
    """SGLang 0.5.23's ``_mamba_radix_cache_resolution`` for a linear-attention hybrid with
    the radix cache: ``extra_buffer`` with the overlap loop or pages over one token, else
    ``no_buffer``."""
    return case.overlap or case.page_size > 1


def _one_rank() -> dict[str, Any]:
    """Stamp one-rank parallel groups (SGLang's ``override_permanently``); return the
    stamp that was there before, for :func:`_restore_parallel`."""
    parallel = get_parallel()
    before = dict(parallel._stamp)  # the stamp has no public reader
    fields = {name: (OneRank() if "group" in name else 0)
              for name, decl in _derived_widths().items() if not decl.fn}
    parallel.override_permanently(**fields)
    return before


def _restore_parallel(before: dict[str, Any]) -> None:
    """Put back the parallel stamp a case found, so that a later module in the same
    process (the pool-sizing reference) sees the process as it was."""
    parallel = get_parallel()
    parallel.clear_stamp()
    if before:
        parallel.override_permanently(**before)


def build(case: LoopCase) -> Any:
    """SGLang's ``Scheduler`` for ``case``, built by its own ``__init__``."""
    override = _server_args(case)
    server_args = override.install()
    model_config = AttributeBag(
        is_generation=True, is_multimodal=False, is_multimodal_gen=False,
        is_encoder_decoder=False, use_ngram_embedding=False, context_len=case.context_len,
        vocab_size=VOCAB, hf_eos_token_id={EOS}, hf_text_config=None,
        self_opened_think_start_ids=None, think_end_ids=None,
        hf_config=AttributeBag(architectures=["LlamaForCausalLM"],
                               index_share_for_mtp_iteration=False))
    worker = TableWorker(model_config, lambda rid, k: next_token(case, rid, k),
                         lambda rid: len(case.requests[rid].prompt))
    rows = case.max_running_requests

    def build_kv_cache(**kwargs: Any) -> Any:
        pool = sg.req_to_token_pool(rows, case.context_len + 8)
        window = case.sliding_window_size
        if case.mamba_slots is not None:  # a linear-attention hybrid
            pool = mamba_sglang.hybrid_req_to_token_pool(rows, case.mamba_slots,
                                                         case.context_len + 8, case.overlap,
                                                         extra_buffer=case.radix
                                                         and _extra_buffer(case))
            alloc = sg.allocator(case.page_size, case.pool_tokens)
            tree = mamba_sglang.mamba_tree_cache(pool, alloc, case.page_size,
                                                 radix=case.radix,
                                                 extra_buffer=_extra_buffer(case))
        elif window is None:
            alloc = sg.allocator(case.page_size, case.pool_tokens)
            tree = sg.tree_cache(pool, alloc, case.page_size, case.radix)
        else:  # a sliding-window hybrid: both pools, the (FULL, SWA) tree, on or disabled
            alloc = sg.swa_allocator(case.page_size, case.pool_tokens, case.swa_pool_tokens)
            tree = sg.swa_tree_cache(pool, alloc, case.page_size, window,
                                     disable=not case.radix)
        return kv_cache_builder.KVCacheBuildResult(
            is_hybrid_swa=window is not None, is_hybrid_ssm=case.mamba_slots is not None,
            sliding_window_size=window,
            full_tokens_per_layer=None if window is None else case.pool_tokens,
            swa_tokens_per_layer=case.swa_pool_tokens, req_to_token_pool=pool,
            token_to_kv_pool_allocator=alloc, disable_radix_cache=not case.radix,
            tree_cache=tree)

    class CaseScheduler(sg_scheduler.Scheduler):
        def init_soft_watchdog(self) -> None:
            self.soft_watchdog = None

        def init_startup_timing_summary(self) -> None:
            pass

        def init_model_config(self) -> None:
            self.model_config = model_config
            self.dllm_config = None

        def init_ipc_channels(self, port_args: Any) -> None:
            sink = Sink()
            self.ipc_channels = AttributeBag(
                recv_from_tokenizer=None, recv_from_rpc=None, send_to_tokenizer=sink,
                send_to_detokenizer=sink, send_metrics_from_scheduler=None)
            self.recv_from_tokenizer = None
            self.load_snapshot_writer = None

        def maybe_init_ngram_embedding(self) -> None:
            self.ngram_embedding_manager = _NoNgram()
            self.use_ngram_embedding = False

        def init_model_worker(self) -> None:
            # what TpModelWorker reports to the scheduler, for this pool
            self.tp_worker = self.model_worker = worker
            self.maybe_init_draft_worker()  # none: no speculative decoding
            self.max_total_num_tokens = case.pool_tokens
            self.max_prefill_tokens = case.max_prefill_tokens
            self.max_running_requests = case.max_running_requests
            self.max_queued_requests = None
            self.max_req_len = max_req_len(case)
            self.max_req_input_len = self.max_req_len - 5
            self.random_seed = 0
            self.device = "cpu"
            self.schedule_stream = self.forward_stream = torch.cpu.Stream()
            self.min_free_slots_delayer = None
            self.pad_input_ids_func = None
            self.kv_cache_allocation_time = 0.0
            self.startup_available_gpu_memory_gb = 0.0
            if not get_parallel().pp_max_micro_batch_size:  # as Scheduler.init_model_worker
                get_context().override("scheduler.pp_max_micro_batch_size_default",
                                       pp_max_micro_batch_size=max(self.max_running_requests, 1))
            for name in ("tp_group", "tp_cpu_group", "attn_tp_group", "attn_tp_cpu_group",
                         "attn_cp_group", "attn_cp_cpu_group", "pp_group", "world_group",
                         "dp_tp_group", "dp_tp_cpu_group"):
                setattr(self, name, OneRank())

    sched_parallel = _one_rank()
    saved = (sg_scheduler.get_resolved_model_impl, sg_scheduler.bootstrap.init_parallel_runtime,
             sg_scheduler.bootstrap.init_layer_runtime, kv_cache_builder.build_kv_cache)
    sg_scheduler.get_resolved_model_impl = lambda config: sg_scheduler.ModelImpl.SGLANG
    sg_scheduler.bootstrap.init_parallel_runtime = lambda **kwargs: None
    sg_scheduler.bootstrap.init_layer_runtime = lambda **kwargs: None
    kv_cache_builder.build_kv_cache = build_kv_cache
    try:
        sched = CaseScheduler(server_args, AttributeBag(nccl_port=0))
    except BaseException:
        override.restore()
        _restore_parallel(sched_parallel)
        raise
    finally:
        (sg_scheduler.get_resolved_model_impl, sg_scheduler.bootstrap.init_parallel_runtime,
         sg_scheduler.bootstrap.init_layer_runtime, kv_cache_builder.build_kv_cache) = saved
    sched.server_args_override = override
    sched.parallel_before = sched_parallel
    return sched


class _NoNgram:
    """The n-gram embedding manager of a model without n-gram embeddings: passes batches."""

    def prepare_for_forward(self, batch: Any, chunked_req: Any = None) -> Any:
        return batch

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return lambda *args, **kwargs: None


def tokenized(rid: int, case: LoopCase) -> Any:
    """Request ``rid`` as the tokenizer manager sends it to the scheduler."""
    spec = case.requests[rid]
    params = SamplingParams(max_new_tokens=spec.max_new_tokens, ignore_eos=spec.ignore_eos)
    params.normalize(None)
    params.verify(VOCAB)
    return TokenizedGenerateReqInput(
        rid=str(rid), input_text=None, input_ids=array("q", spec.prompt), input_embeds=None,
        mm_inputs=None, token_type_ids=None, sampling_params=params, return_logprob=False,
        logprob_start_len=-1, top_logprobs_num=0, token_ids_logprob=None, stream=False)


class ScriptReceiver(ScriptRecorder):
    """The scheduler's request receiver, fed by the case: records each iteration's outcome
    and delivers arrivals; raises the exit flag once every request has finished."""

    def recv_requests(self, local_reqs: Any = None) -> list[Any]:
        sched = self.sched
        if self.iterations:
            self.records.append(self.record())
        self.iterations += 1
        if self.iterations > MAX_ITERATIONS:
            raise RuntimeError(f"SGLang's loop ran {MAX_ITERATIONS} iterations: stuck with "
                               f"{[r.rid for r in sched.waiting_queue]} waiting, last "
                               f"records {self.records[-2:]}")
        if len(self.finished) == len(self.case.requests):
            sched.gracefully_exit = True
            return []
        idle = [r["mode"] == "IDLE" for r in self.records[-STUCK_IDLE:]]
        if (len(idle) == STUCK_IDLE and all(idle) and sched.waiting_queue
                and not self.pending and sched.running_batch.is_empty()):
            raise RuntimeError(f"stuck: SGLang's loop left {[r.rid for r in sched.waiting_queue]} "
                               f"waiting with nothing running for {STUCK_IDLE} iterations")
        return self.arrivals()

    def ratio(self) -> float:
        return float(self.sched.new_token_ratio_tracker.current)


def run(case: LoopCase) -> list[dict[str, Any]]:
    """One record per iteration of SGLang's loop on ``case`` (see :mod:`loop_pagedkv`)."""
    sched = build(case)
    log = Retractions()
    logger = logging.getLogger(sg_scheduler.__name__)
    logger.addHandler(log)
    receiver = ScriptReceiver(sched, case, log, tokenized)
    sched.request_receiver = receiver
    sched.schedule_stream.synchronize = lambda: None  # as run_event_loop does on a CPU
    sched._war_barrier_enabled = False
    sched.metrics_reporter.start_scheduler_time_accounting()

    note_batches(sched, receiver)
    real_update = sched.update_running_batch

    def update_running_batch(batch: Any) -> Any:
        out = real_update(batch)
        receiver.skipped = receiver.skipped or out is None  # None only when it skips
        return out

    sched.update_running_batch = update_running_batch
    restore_retract = note_retractions(sg_schedule_batch.ScheduleBatch, receiver)
    pin_memory = torch.Tensor.pin_memory
    if case.mamba_slots is not None and case.radix:
        # the decode step's state-tracking mask is staged in pinned memory, which a CPU
        # has none of: the tensor itself stands in
        torch.Tensor.pin_memory = lambda self, *args, **kwargs: self
    try:
        with _env_overrides((envs.SGLANG_DISABLE_CONSECUTIVE_PREFILL_OVERLAP,
                             case.disable_consecutive_prefill_overlap),
                            (envs.SGLANG_SWA_EVICTION_INTERVAL, case.swa_eviction_interval)):
            (sched.event_loop_overlap if case.overlap else sched.event_loop_normal)()
    finally:
        torch.Tensor.pin_memory = pin_memory
        restore_retract()
        logger.removeHandler(log)
        sched.server_args_override.restore()
        _restore_parallel(sched.parallel_before)
    unknown = UNKNOWN_READS - ALLOWED_UNKNOWN
    assert not unknown, f"SGLang read model-config fields the stand-in lacks: {sorted(unknown)}"
    return receiver.records
