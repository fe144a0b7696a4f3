"""The scheduler's second executor: a real Hugging Face model on the paged KV pool.

Follows SGLang's ``python/sglang/srt/model_executor/model_runner.py`` (``ModelRunner``:
``load_model``, ``profile_max_num_token`` / ``init_memory_pool``, ``forward_extend``,
``forward_decode``, ``sample``). The scheduler
(:class:`~pagedkv.managers.scheduler.Scheduler`) decides who runs and hands over a
:class:`~pagedkv.model_executor.forward_batch_info.ForwardBatch`: each request's row of
``req_to_token``, how many of its tokens are already in the pool (``prefix_lens``: a
radix-cache hit, earlier chunks, or everything but the newest token when decoding) and the
slots its new tokens go to (``out_cache_loc``). :class:`ModelRunner` then

1. gathers the new tokens (prompt + output so far, from ``prefix_len`` on) and their
   positions, and runs the model over them: every layer writes their K/V into
   ``MHATokenToKVPool`` at ``out_cache_loc`` and attends over the request's row
   (:mod:`pagedkv.models.llama`); a cached prefix is read, never recomputed;
2. samples greedily from the last new token of every request that samples (a chunk cut short
   samples nothing);
3. returns the measured seconds and the tokens; the scheduler appends them to ``output_ids``.

Retraction needs nothing here: the scheduler frees the victim's slots, and when it is
admitted again its prompt and output so far are an ordinary extend (minus what the radix
cache still holds).

Sizing (:meth:`ModelRunner.load`): on a GPU the pool is what SGLang would build, measured
around the weights' arrival (:mod:`pagedkv.model_executor.pool_sizing`); on the CPU the pool
size is given.

Where we simplify: one GPU, greedy sampling only, no CUDA graphs, timing by the host clock
around each pass. The overlap loop's order is kept (a decode step gets the in-flight token
as its input, ``ForwardBatch.input_ids``), but each pass runs to completion before the
scheduler goes on: no CPU work is hidden behind the GPU.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import numpy as np
import torch
from torch import nn

from pagedkv.errors import bad_value, check_positive_int
from pagedkv.layers.attention.backend import ATTENTION_BACKENDS, init_forward_metadata
from pagedkv.layers.attention.checks import interpreted
from pagedkv.mem_cache.memory_pool import MHATokenToKVPool
from pagedkv.model_executor.forward_batch_info import ForwardBatch, ForwardResult
from pagedkv.model_executor.model_loader import MemGetInfo, resolve_dtype
from pagedkv.model_executor.pool_sizing import load_and_size_pool
from pagedkv.models.llama import check_causal_lm, forward_hidden, logits, sliding_window
from pagedkv.sizing import KVPoolPlan, max_req_input_len


class ModelRunner:
    """A causal LM whose attention reads and writes the pool through the scheduler's slots.

    Args:
        model: a Hugging Face causal LM of a supported type
            (:data:`pagedkv.models.llama.SUPPORTED_MODEL_TYPES`), in eval mode, on its device.
        max_total_num_tokens: KV slots in the pool (the scheduler's pool size), a multiple
            of ``page_size``.
        page_size: tokens per page (the pool gets one dummy page, as SGLang's).
        eos_token_ids: tokens that end a request (default: the model's generation config).
        attention_backend: decode attention: ``"triton"`` (the paged kernel) or
            ``"torch_native"`` (its torch reference); None: Triton wherever it can run on the
            model's device (CUDA; the CPU only under Triton's interpreter, that is on a
            machine without CUDA), else the reference.
        name: the model's name in the trace.
        plan: the sizing that produced ``max_total_num_tokens`` (None: given by hand).
        tokenizer: turns text prompts into ids and outputs back (None: ids only).
        context_len: the longest sequence served (default the model's
            ``max_position_embeddings``).
        device_memory_bytes: the device's total memory (0: not measured, the CPU).

    Attributes:
        token_to_kv_pool: the :class:`MHATokenToKVPool` (``[slots + page_size, H_kv, D]`` per
            layer, in the model's dtype, on its device).
        context_len: the longest sequence served; sliding_window: tokens a sliding layer
            sees (None: full attention everywhere).
        startup_log: SGLang's start-up lines for this pool.

    Raises:
        ConfigError: an unsupported architecture, a bad size or backend.
    """

    predicts_step_times = False  # a step's time is known only by running it; tokens are sampled

    def __init__(self, model: nn.Module, *, max_total_num_tokens: int, page_size: int = 1,
                 eos_token_ids: Iterable[int] | None = None, attention_backend: str | None = None,
                 name: str | None = None, plan: KVPoolPlan | None = None,
                 tokenizer: Any = None, context_len: int | None = None,
                 device_memory_bytes: int = 0) -> None:
        check_causal_lm(model)
        self.page_size = check_positive_int("page_size", page_size)
        self.max_total_num_tokens = check_positive_int("max_total_num_tokens",
                                                       max_total_num_tokens, page_size)
        if max_total_num_tokens % page_size:
            raise bad_value("max_total_num_tokens", max_total_num_tokens,
                            f"a multiple of page_size={page_size}")
        self.model, self.config = model, model.config
        weight = next(model.parameters())
        self.device, self.dtype = weight.device, weight.dtype
        resolve_dtype(self.dtype, self.device)  # refuse what the device cannot run
        self.attention_backend = _backend(attention_backend, self.device)
        self.name = name or getattr(self.config, "_name_or_path", "") or type(model).__name__
        self.plan, self.tokenizer = plan, tokenizer
        self.device_memory_bytes = device_memory_bytes
        attn = model.model.layers[0].self_attn
        self.token_to_kv_pool = MHATokenToKVPool(
            max_total_num_tokens, page_size, self.dtype, self.config.num_key_value_heads,
            attn.head_dim, self.config.num_hidden_layers, device=str(self.device))
        self.context_len = context_len or (
            int(getattr(self.config, "max_position_embeddings", 0) or 0) or None)
        self.sliding_window = sliding_window(self.config)
        self.vocab_size = int(self.config.vocab_size)
        self.eos_token_ids = tuple(_model_eos(model) if eos_token_ids is None else eos_token_ids)
        #: the pool is the size given (``max_total_tokens``, or by hand), not what free
        #: memory left; notes: what the user should know about the settings (one line each)
        self.pool_capped, self.notes = plan is None, []
        k, v = self.token_to_kv_pool.kv_size_bytes()
        self.startup_log = plan.log_lines() if plan is not None else [
            f"KV Cache is allocated. #tokens: {max_total_num_tokens}, "
            f"K size: {k / 2**30:.2f} GB, V size: {v / 2**30:.2f} GB"]

    # ----- building one from a checkpoint ------------------------------------------------
    @classmethod
    def load(cls, source: Any, *, device: str | torch.device | None = None,
             dtype: str | torch.dtype | None = None, page_size: int = 1,
             mem_fraction_static: float | None = None, max_total_tokens: int | None = None,
             context_len: int | None = None, attention_backend: str | None = None, seed: int = 0,
             eos_token_ids: Iterable[int] | None = None, tokenizer: Any = None,
             mem_get_info: MemGetInfo | None = None) -> ModelRunner:
        """Load ``source`` and build the pool SGLang would build for it.

        Args:
            source: a hub id or folder, a ``transformers`` config (random weights) or a model
                (see :func:`~pagedkv.model_executor.model_loader.load_causal_lm`).
            device, dtype: default ``cuda`` with bf16 (fp16 before sm_80), else ``cpu``
                with fp32; checked before anything is loaded.
            page_size: tokens per page.
            mem_fraction_static: ``f``, the share of the free memory before loading kept for
                weights + KV (default: SGLang's for the card's total memory).
            max_total_tokens: cap on the pool in tokens (SGLang's ``--max-total-tokens``);
                required where free memory is not measured (the CPU).
            context_len: the context length used for the request rows (default the model's).
            attention_backend, eos_token_ids, tokenizer: see the class.
            seed: seeds random weights.
            mem_get_info: replaces ``torch.cuda.mem_get_info`` (tests drive this path on
                the CPU with readings of their own).

        A model already on the GPU (``source`` an ``nn.Module``) is not in either reading's
        difference: its weights were resident before the first one.

        Raises:
            ConfigError: a bad device, dtype, size or architecture, a
                ``mem_fraction_static`` outside (0, 1] (NaN and infinities included), a
                ``max_total_tokens`` below one page, a checkpoint that cannot be had now, or
                the CPU without ``max_total_tokens``.

        On the CPU a given ``mem_fraction_static`` has no effect; ``notes`` says so.
            NotEnoughMemoryError: the weights leave no room for a pool.
        """
        loaded = load_and_size_pool(source, device=device, dtype=dtype, page_size=page_size,
                                    mem_fraction_static=mem_fraction_static,
                                    max_total_tokens=max_total_tokens, context_len=context_len,
                                    seed=seed, mem_get_info=mem_get_info)
        runner = cls(loaded.model, max_total_num_tokens=loaded.max_total_num_tokens,
                     page_size=page_size, eos_token_ids=eos_token_ids,
                     attention_backend=attention_backend, name=loaded.name, plan=loaded.plan,
                     tokenizer=tokenizer, context_len=context_len,
                     device_memory_bytes=loaded.device_memory_bytes)
        runner.pool_capped, runner.notes = loaded.pool_capped, loaded.notes
        return runner

    # ----- the executor interface ----------------------------------------------------------
    @torch.inference_mode()
    def forward(self, batch: ForwardBatch) -> ForwardResult:
        """Run one extend or decode pass and sample greedily.

        Returns:
            the measured seconds (host clock, after the device finished) and int64
            ``[bs]`` next tokens (-1 for a request that does not sample).

        Raises:
            ConfigError: a batch without the page table, or slots outside the pool.
        """
        if batch.req_to_token_pool is None:
            raise bad_value("batch.req_to_token_pool", None, "the scheduler's ReqToTokenPool")
        start = time.perf_counter()
        ids, positions = self._inputs(batch)
        meta = init_forward_metadata(batch.mode == "decode", batch.req_to_token_pool.req_to_token,
                                     batch.req_pool_indices, batch.prefix_lens, batch.extend_lens,
                                     batch.out_cache_loc, self.device,
                                     num_slots=self.token_to_kv_pool.size + self.page_size)
        hidden = forward_hidden(self.model, ids.to(self.device), positions.to(self.device), meta,
                                self.token_to_kv_pool, self.attention_backend)
        last = np.cumsum(batch.extend_lens) - 1  # each request's last new token
        sampled = np.flatnonzero(batch.sample)
        out = np.full(len(batch.reqs), -1, dtype=np.int64)
        if len(sampled):
            rows = torch.as_tensor(last[sampled], device=self.device)
            out[sampled] = logits(self.model, hidden[rows]).argmax(dim=-1).cpu().numpy()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return ForwardResult(time.perf_counter() - start, out)

    def _inputs(self, batch: ForwardBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """int64 ``[T]`` token ids and positions of the pass's new tokens."""
        if batch.mode == "decode":  # the newest sampled token, at the end of the KV
            ids = (batch.input_ids if batch.input_ids is not None else
                   np.fromiter((r.output_ids[-1] for r in batch.reqs), np.int64, len(batch.reqs)))
            return torch.as_tensor(ids), torch.as_tensor(batch.prefix_lens.astype(np.int64))
        parts, pos = [], []
        for req, prefix, n in zip(batch.reqs, batch.prefix_lens.tolist(),
                                  batch.extend_lens.tolist(), strict=True):
            parts.append(req.token_ids(prefix + n)[prefix:])
            pos.append(np.arange(prefix, prefix + n, dtype=np.int64))
        return torch.as_tensor(np.concatenate(parts)), torch.as_tensor(np.concatenate(pos))

    # ----- what the engine checks before a run ----------------------------------------------
    def check_prompt(self, index: int, ids: Iterable[int], max_new_tokens: int) -> None:
        """Refuse a prompt the model cannot run, before any work.

        Raises:
            ConfigError: an empty prompt, a token id outside ``[0, vocab_size)``, a
                prompt SGLang refuses on this pool (``max_req_input_len``; the message says
                what pool would take it: a larger ``max_total_tokens`` where the pool is the
                size given, a higher ``mem_fraction_static`` where free memory sized it), or
                a sequence longer than the model's context or its sliding window.
        """
        ids = list(ids)
        if not ids:
            raise bad_value(f"prompts[{index}]", ids, "a non-empty list of token ids")
        bad = [t for t in ids if not 0 <= int(t) < self.vocab_size]
        if bad:
            raise bad_value(f"prompts[{index}] token id", bad[0], f"an id in [0, {self.vocab_size})")
        longest = len(ids) + max_new_tokens
        if self.context_len is not None and len(ids) >= self.context_len:
            raise bad_value(f"len(prompts[{index}])", len(ids),
                            f"< context_len={self.context_len} (the model's max_position_embeddings)")
        total = self.max_total_num_tokens
        limit = max_req_input_len(total, self.context_len or total)
        if len(ids) >= limit:  # the scheduler refuses it too; here with what helps
            need = -(-(len(ids) + 7) // self.page_size) * self.page_size
            if self.context_len is not None and self.context_len <= total:
                helps = (f"a shorter prompt (context_len={self.context_len} bounds it here; a "
                         "larger pool would not help)")
            elif self.pool_capped or self.plan is None:
                helps = f"max_total_tokens >= {need} (the pool is the size given)"
            else:
                helps = (f"a pool of >= {need} tokens: a higher mem_fraction_static than "
                         f"{self.plan.mem_fraction_static} or a GPU with more free memory")
            raise bad_value(f"len(prompts[{index}])", len(ids),
                            f"< max_req_input_len={limit} (min(context_len - 1, "
                            f"max_total_num_tokens - 1) - 5 with max_total_num_tokens={total}); "
                            f"{helps}")
        if self.sliding_window is not None and longest > self.sliding_window:
            raise bad_value(f"len(prompts[{index}]) + max_new_tokens", longest,
                            f"<= sliding_window={self.sliding_window} (pagedkv attends over "
                            "whole sequences only)")


def _backend(name: str | None, device: torch.device) -> str:
    """The decode-attention backend for ``device`` (see the class), or ConfigError."""
    triton_device = "cpu" if interpreted() else "cuda"
    if name is None:
        return "triton" if device.type == triton_device else "torch_native"
    if name not in ATTENTION_BACKENDS:
        raise bad_value("attention_backend", name, ", ".join(ATTENTION_BACKENDS))
    if name == "triton" and device.type != triton_device:
        how = "its CPU interpreter" if interpreted() else "CUDA"
        raise bad_value("attention_backend", name, f"torch_native for a model on {device}: Triton "
                        f"runs on {triton_device} here ({how})")
    return name


def _model_eos(model: nn.Module) -> tuple[int, ...]:
    """The model's end-of-sequence ids (generation config first, as ``generate`` reads them)."""
    gen = getattr(model, "generation_config", None)
    eos = getattr(gen, "eos_token_id", None)
    if eos is None:
        eos = getattr(model.config, "eos_token_id", None)
    if eos is None:
        return ()
    return (int(eos),) if isinstance(eos, int) else tuple(int(e) for e in eos)
