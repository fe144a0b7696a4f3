"""A Hugging Face Llama on pagedkv's pools and kernel, driven by hand (no scheduler).

Chapter 6's small demonstration: the caller admits prompts, decodes and releases them, and
sees every step. :class:`PagedLlamaRunner` does the KV bookkeeping the way SGLang's
``model_executor/model_runner.py`` and ``layers/radix_attention.py`` do:

1. a new request gets a row of ``ReqToTokenPool`` and KV slots from the allocator
   (``alloc_extend`` for the prompt, ``alloc_decode`` for each new token);
2. the slots are written into its row of ``req_to_token``;
3. the model runs through :class:`~pagedkv.model_executor.model_runner.ModelRunner`'s pool
   and forward pass (:mod:`pagedkv.models.llama`): every layer scatters its new K/V into
   ``MHATokenToKVPool`` at those slots and attends over the row, prefill with torch SDPA,
   decode with :func:`~pagedkv.layers.attention.paged_decode_attention`.

The scheduler-driven engine (admission, retraction, the radix cache) is
:class:`pagedkv.entrypoints.engine.Engine` over the same ModelRunner. On a GPU, for example on Colab::

    model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B",
                                                 dtype=torch.bfloat16).cuda()
    runner = PagedLlamaRunner(model, page_size=16)
    tokens, logits = runner.generate([tokenizer("Paged attention is").input_ids], 32)
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from pagedkv.errors import AllocatorError, OutOfMemoryError, bad_value, check_positive_int
from pagedkv.layers.attention.backend import init_forward_metadata
from pagedkv.mem_cache.allocator import make_allocator
from pagedkv.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool
from pagedkv.model_executor.model_runner import ModelRunner
from pagedkv.models.llama import forward_hidden, logits

_I64 = torch.int64


class PagedLlamaRunner:
    """Prefill and decode a Llama-family causal LM with pagedkv's KV cache, by hand.

    Args:
        model: a transformers causal LM of a type :class:`ModelRunner` supports, in eval mode.
        page_size: tokens per KV page (1 selects ``TokenToKVPoolAllocator``).
        max_total_tokens: KV slots in the pool (a multiple of ``page_size``).
        max_num_reqs: rows of ``ReqToTokenPool``.
        max_context_len: columns of ``req_to_token``: longest prompt + output.

    Raises:
        ConfigError: an unsupported model or a bad size.
    """

    def __init__(
        self,
        model: nn.Module,
        *,
        page_size: int = 1,
        max_total_tokens: int = 4096,
        max_num_reqs: int = 16,
        max_context_len: int = 1024,
    ) -> None:
        check_positive_int("max_total_tokens", max_total_tokens, page_size)
        if max_total_tokens % page_size:
            raise bad_value("max_total_tokens", max_total_tokens,
                            f"a multiple of page_size={page_size}")
        self.runner = ModelRunner(model, max_total_num_tokens=max_total_tokens, page_size=page_size,
                                  eos_token_ids=())
        self.model, self.device, self.page_size = model, self.runner.device, page_size
        self.req_to_token_pool = ReqToTokenPool(max_num_reqs, max_context_len)
        self.allocator = make_allocator(max_total_tokens, page_size)
        self.seq_lens: dict[int, int] = {}  # row -> tokens in the cache

    @property
    def token_to_kv_pool(self) -> MHATokenToKVPool:
        """The K/V pool (the runner's)."""
        return self.runner.token_to_kv_pool

    # ----- KV bookkeeping -------------------------------------------------------------
    def _write_rows(self, rows: list[int], starts: list[int], loc: torch.Tensor) -> None:
        """``req_to_token[row, start:start + n] = loc[segment]`` for each request."""
        offset = 0
        for row, start in zip(rows, starts, strict=True):
            n = self.seq_lens[row] - start
            self.req_to_token_pool.write(row, torch.arange(start, start + n, dtype=_I64),
                                         loc[offset:offset + n])
            offset += n

    def prefill(self, prompts: list[list[int]]) -> tuple[list[int], torch.Tensor]:
        """Admit ``prompts`` (token ids), run them through the model, cache their K/V.

        Returns:
            (rows, logits): the request rows, and float32 ``[B, vocab]`` logits of each
            prompt's last token.

        Raises:
            ConfigError: no prompts, an empty prompt or one longer than ``max_context_len``.
            OutOfMemoryError: no free request row or not enough KV slots.
        """
        if not prompts:
            raise bad_value("prompts", prompts, "a non-empty list of token-id lists")
        width = self.req_to_token_pool.max_context_len
        for i, prompt in enumerate(prompts):
            if not 1 <= len(prompt) <= width:
                raise bad_value(f"len(prompts[{i}])", len(prompt), f"a length in [1, {width}]")
        rows = self.req_to_token_pool.alloc(len(prompts))
        if rows is None:
            raise OutOfMemoryError(f"no {len(prompts)} free request rows")
        lens = torch.tensor([len(p) for p in prompts], dtype=_I64)
        loc = self.allocator.alloc_extend(torch.zeros_like(lens), lens,
                                          torch.full_like(lens, -1), int(lens.sum()))
        if loc is None:
            self.req_to_token_pool.free(rows)
            raise OutOfMemoryError(f"{int(lens.sum())} KV slots asked, "
                                   f"{self.allocator.available_size()} free")
        self.seq_lens.update(zip(rows, lens.tolist(), strict=True))
        self._write_rows(rows, [0] * len(rows), loc)
        ids = torch.tensor([t for p in prompts for t in p], dtype=_I64)
        positions = torch.cat([torch.arange(n, dtype=_I64) for n in lens.tolist()])
        hidden = self._forward(False, ids, positions, rows, torch.zeros_like(lens), lens, loc)
        return rows, logits(self.model, hidden[lens.cumsum(0) - 1])

    def decode(self, rows: list[int], next_tokens: torch.Tensor) -> torch.Tensor:
        """Append one token per request and return float32 ``[B, vocab]`` next-token logits.

        Raises:
            ConfigError: a row that holds no request, or a row that is full.
            OutOfMemoryError: not enough KV slots for the new tokens.
        """
        for row in rows:
            if row not in self.seq_lens:
                raise bad_value("rows", row, f"a live request row, one of {list(self.seq_lens)}")
            if self.seq_lens[row] >= self.req_to_token_pool.max_context_len:
                raise bad_value(f"seq_lens[{row}]", self.seq_lens[row],
                                f"< max_context_len={self.req_to_token_pool.max_context_len}")
        old = torch.tensor([self.seq_lens[r] for r in rows], dtype=_I64)
        table = self.req_to_token_pool.req_to_token
        last_loc = table[torch.tensor(rows), old - 1].to(_I64)
        loc = self.allocator.alloc_decode(old + 1, last_loc)
        if loc is None:
            raise OutOfMemoryError(f"{len(rows)} decode tokens, "
                                   f"{self.allocator.available_size()} free KV slots")
        for row in rows:
            self.seq_lens[row] += 1
        self._write_rows(rows, old.tolist(), loc)
        hidden = self._forward(True, next_tokens.cpu().to(_I64), old, rows, old, torch.ones_like(old),
                               loc)
        return logits(self.model, hidden)

    def release(self, rows: list[int]) -> None:
        """Free the requests' KV slots and rows (a finished request)."""
        table = self.req_to_token_pool.req_to_token
        for row in rows:
            self.allocator.free(table[row, : self.seq_lens.pop(row)].to(_I64))
        self.req_to_token_pool.free(list(rows))

    def check_invariants(self) -> None:
        """Raise :class:`AllocatorError` unless the pools, the allocator and the runner agree.

        Checks the allocator's and the request pool's own invariants; every live request's
        row is allocated; its slots are distinct from every other live token's; and the
        allocator holds exactly the live tokens.
        """
        self.allocator.check_invariants()
        self.req_to_token_pool.check_invariants()
        if set(self.seq_lens) & set(self.req_to_token_pool.free_slots):
            raise AllocatorError("a live request's row is on the free list")
        table = self.req_to_token_pool.req_to_token
        slots = [table[row, :n] for row, n in self.seq_lens.items()]
        total = sum(self.seq_lens.values())
        if slots and len(torch.unique(torch.cat(slots))) != total:
            raise AllocatorError("two live tokens share a KV slot")
        if self.allocator.used_slots() != total:
            raise AllocatorError(f"the allocator holds {self.allocator.used_slots()} slots, "
                                 f"the live requests {total} tokens")

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], max_new_tokens: int
                 ) -> tuple[list[list[int]], torch.Tensor]:
        """Greedy decoding: ``max_new_tokens`` per prompt, no stop tokens; frees at the end.

        Returns:
            (tokens, logits): the new token ids per prompt, and float32 logits
            ``[B, max_new_tokens, vocab]`` (step 0 from the prefill, then one per decode).
        """
        check_positive_int("max_new_tokens", max_new_tokens)
        rows, first = self.prefill(prompts)
        steps = [first]
        for _ in range(max_new_tokens - 1):
            steps.append(self.decode(rows, steps[-1].argmax(dim=-1)))
        self.release(rows)
        all_logits = torch.stack(steps, dim=1)
        return all_logits.argmax(dim=-1).tolist(), all_logits

    # ----- the forward pass -----------------------------------------------------------
    def _forward(self, decode: bool, ids: torch.Tensor, positions: torch.Tensor, rows: list[int],
                 prefix: torch.Tensor, extend: torch.Tensor, loc: torch.Tensor) -> torch.Tensor:
        """Hidden states ``[T, hidden]`` of the new tokens (no final norm)."""
        meta = init_forward_metadata(decode, self.req_to_token_pool.req_to_token,
                                     np.asarray(rows, dtype=np.int64), prefix.numpy(),
                                     extend.numpy(), loc.numpy(), self.device,
                                     num_slots=self.token_to_kv_pool.size + self.page_size)
        return forward_hidden(self.model, ids.to(self.device), positions.to(self.device), meta,
                              self.token_to_kv_pool)
