"""A Hugging Face Llama run on pagedkv's pools, allocator and Triton decode kernel.

The model's own modules and weights do everything except attention: embeddings, RMSNorm,
rotary embedding, the q/k/v/o projections, the MLP and the LM head. pagedkv does the KV
bookkeeping the way SGLang's ``model_executor/model_runner.py`` and
``layers/radix_attention.py`` do:

1. a new request gets a row of ``ReqToTokenPool`` and KV slots from the allocator
   (``alloc_extend`` for the prompt, ``alloc_decode`` for each new token);
2. the slots are written into its row of ``req_to_token``;
3. in every layer the new K and V are scattered into ``MHATokenToKVPool`` at those slots
   (``set_kv_buffer``);
4. attention reads K/V back from the pool: prefill with torch SDPA over the gathered slots
   (SGLang uses its extend kernel), decode with :func:`paged_decode_attention`.

Where we simplify: no radix cache, no scheduler, no chunked prefill, no CUDA graphs; full
(non-sliding) attention only. Works for the Llama module layout (Llama, TinyLlama, Qwen2 /
Qwen2.5, Mistral without a sliding window). On a GPU, for example on Colab::

    model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B",
                                                 dtype=torch.bfloat16).cuda()
    runner = PagedLlamaRunner(model, page_size=16)
    tokens, logits = runner.generate([tokenizer("Paged attention is").input_ids], 32)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from pagedkv.errors import AllocatorError, OutOfMemoryError, bad_value, check_positive_int
from pagedkv.layers.attention.decode_attention import paged_decode_attention
from pagedkv.mem_cache.allocator import PagedTokenToKVPoolAllocator, TokenToKVPoolAllocator
from pagedkv.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool

_I64 = torch.int64


@dataclass(frozen=True)
class StepBatch:
    """What one forward pass needs to know (a small part of SGLang's ``ForwardBatch``).

    Attributes:
        req_pool_indices: int64 ``[B]``, each request's row of ``req_to_token``.
        prefix_lens: int64 ``[B]``, tokens already in the cache before this step.
        seq_lens: int64 ``[B]``, tokens in the cache after this step.
        out_cache_loc: int64 ``[T]``, the slot of every new token (T = sum of new tokens).
        positions: int64 ``[T]``, the position of every new token in its sequence.
        is_decode: one new token per request, attended by the Triton kernel.
    """

    req_pool_indices: torch.Tensor
    prefix_lens: torch.Tensor
    seq_lens: torch.Tensor
    out_cache_loc: torch.Tensor
    positions: torch.Tensor
    is_decode: bool


class PagedLlamaRunner:
    """Prefill and decode a ``LlamaForCausalLM`` with pagedkv's KV cache.

    Args:
        model: a transformers causal LM with the Llama module layout, in eval mode.
        page_size: tokens per KV page (1 selects ``TokenToKVPoolAllocator``).
        max_total_tokens: KV slots in the pool (a multiple of ``page_size``).
        max_num_reqs: rows of ``ReqToTokenPool``.
        max_context_len: columns of ``req_to_token``: longest prompt + output.

    Raises:
        ConfigError: a model without the Llama attention layout or a bad size.
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
        check_positive_int("page_size", page_size)
        check_positive_int("max_total_tokens", max_total_tokens, page_size)
        if max_total_tokens % page_size:
            raise bad_value("max_total_tokens", max_total_tokens,
                            f"a multiple of page_size={page_size}")
        attn = model.model.layers[0].self_attn
        if not all(hasattr(attn, n) for n in ("q_proj", "k_proj", "v_proj", "o_proj")) or (
                hasattr(attn, "q_norm") or getattr(model.config, "use_sliding_window", False)):
            raise bad_value("model", type(model).__name__,
                            "a Llama-layout causal LM with full attention (Llama, Qwen2, ...)")
        self.model = model
        config = model.config
        self.head_dim = attn.head_dim
        self.num_q_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        weight = next(model.parameters())
        self.device = weight.device
        self.page_size = page_size
        self.req_to_token_pool = ReqToTokenPool(max_num_reqs, max_context_len,
                                                device=str(self.device))
        self.token_to_kv_pool = MHATokenToKVPool(
            max_total_tokens, page_size, weight.dtype, self.num_kv_heads, self.head_dim,
            config.num_hidden_layers, device=str(self.device))
        self.allocator = (TokenToKVPoolAllocator(max_total_tokens) if page_size == 1
                          else PagedTokenToKVPoolAllocator(max_total_tokens, page_size))
        self.seq_lens: dict[int, int] = {}  # row -> tokens in the cache

    # ----- KV bookkeeping -------------------------------------------------------------
    def _write_rows(self, rows: list[int], starts: list[int], loc: torch.Tensor) -> None:
        """``req_to_token[row, start:start + n] = loc[segment]`` for each request."""
        offset = 0
        table_device = self.req_to_token_pool.req_to_token.device
        for row, start in zip(rows, starts, strict=True):
            n = self.seq_lens[row] - start
            self.req_to_token_pool.write(row, torch.arange(start, start + n, dtype=_I64),
                                         loc[offset:offset + n].to(table_device))
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
        batch = StepBatch(
            req_pool_indices=torch.tensor(rows, dtype=_I64), prefix_lens=torch.zeros_like(lens),
            seq_lens=lens, out_cache_loc=loc,
            positions=torch.cat([torch.arange(n, dtype=_I64) for n in lens.tolist()]),
            is_decode=False)
        ids = torch.tensor([t for p in prompts for t in p], dtype=_I64)
        hidden = self._forward(ids, batch)
        return rows, self._logits(hidden[lens.cumsum(0) - 1])

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
        last_loc = table[torch.tensor(rows), old - 1].to(_I64).cpu()
        loc = self.allocator.alloc_decode(old + 1, last_loc)
        if loc is None:
            raise OutOfMemoryError(f"{len(rows)} decode tokens, "
                                   f"{self.allocator.available_size()} free KV slots")
        for row in rows:
            self.seq_lens[row] += 1
        self._write_rows(rows, old.tolist(), loc)
        batch = StepBatch(req_pool_indices=torch.tensor(rows, dtype=_I64), prefix_lens=old,
                          seq_lens=old + 1, out_cache_loc=loc, positions=old, is_decode=True)
        return self._logits(self._forward(next_tokens.to(_I64), batch))

    def release(self, rows: list[int]) -> None:
        """Free the requests' KV slots and rows (a finished request)."""
        table = self.req_to_token_pool.req_to_token
        for row in rows:
            self.allocator.free(table[row, : self.seq_lens.pop(row)].to(_I64).cpu())
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
        rows, logits = self.prefill(prompts)
        steps = [logits]
        for _ in range(max_new_tokens - 1):
            steps.append(self.decode(rows, steps[-1].argmax(dim=-1)))
        self.release(rows)
        all_logits = torch.stack(steps, dim=1)
        return all_logits.argmax(dim=-1).tolist(), all_logits

    # ----- the forward pass -----------------------------------------------------------
    def _logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.model.lm_head(self.model.model.norm(hidden)).float()

    def _forward(self, input_ids: torch.Tensor, batch: StepBatch) -> torch.Tensor:
        """Hidden states ``[T, hidden]`` of the new tokens, layer by layer (no final norm)."""
        inner = self.model.model
        hidden = inner.embed_tokens(input_ids.to(self.device))
        positions = batch.positions.to(self.device)
        cos, sin = inner.rotary_emb(hidden, positions[None, :])
        for layer_id, layer in enumerate(inner.layers):
            residual = hidden
            attn_in = layer.input_layernorm(hidden)
            hidden = residual + self._attention(layer_id, layer.self_attn, attn_in,
                                                (cos[0], sin[0]), batch)
            hidden = hidden + layer.mlp(layer.post_attention_layernorm(hidden))
        return hidden

    def _attention(self, layer_id: int, attn: nn.Module, hidden: torch.Tensor,
                   cos_sin: tuple[torch.Tensor, torch.Tensor], batch: StepBatch) -> torch.Tensor:
        """Project, rotate, write K/V to the pool, attend over the pool, project out."""
        tokens = hidden.shape[0]
        q = attn.q_proj(hidden).view(tokens, self.num_q_heads, self.head_dim)
        k = attn.k_proj(hidden).view(tokens, self.num_kv_heads, self.head_dim)
        v = attn.v_proj(hidden).view(tokens, self.num_kv_heads, self.head_dim)
        q, k = apply_rotary_pos_emb(q, k, *cos_sin, unsqueeze_dim=1)  # [T, heads, D]
        pool = self.token_to_kv_pool
        pool.set_kv_buffer(layer_id, batch.out_cache_loc.to(self.device), k, v)
        k_cache, v_cache = pool.get_key_buffer(layer_id), pool.get_value_buffer(layer_id)
        table = self.req_to_token_pool.req_to_token
        rows, seq_lens = (t.to(self.device) for t in (batch.req_pool_indices, batch.seq_lens))
        if batch.is_decode:
            out = paged_decode_attention(q, k_cache, v_cache, table, rows, seq_lens,
                                         sm_scale=attn.scaling)
        else:
            out = _extend_attention(q, k_cache, v_cache, table, batch, attn.scaling)
        return attn.o_proj(out.reshape(tokens, -1))


def _extend_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                      req_to_token: torch.Tensor, batch: StepBatch, scale: float) -> torch.Tensor:
    """Causal attention of each request's new tokens over its whole cached sequence.

    ``q`` is ``[T, H_q, D]`` (new tokens of all requests, request after request); keys and
    values are gathered from the pool through ``req_to_token``. Returns ``[T, H_q, D]``.
    Torch SDPA, one request at a time; SGLang's ``extend_attention.py`` is one kernel.
    """
    out = torch.empty_like(q)
    start = 0
    for row, prefix, seq in zip(batch.req_pool_indices.tolist(), batch.prefix_lens.tolist(),
                                batch.seq_lens.tolist(), strict=True):
        n = seq - prefix
        slots = req_to_token[row, :seq].long()
        keys, values = k_cache[slots].transpose(0, 1), v_cache[slots].transpose(0, 1)
        q_pos = torch.arange(prefix, seq, device=q.device)
        mask = torch.arange(seq, device=q.device)[None, :] <= q_pos[:, None]  # [n, seq]
        o = F.scaled_dot_product_attention(q[start:start + n].transpose(0, 1)[None],
                                           keys[None], values[None], attn_mask=mask,
                                           scale=scale, enable_gqa=True)
        out[start:start + n] = o[0].transpose(0, 1)
        start += n
    return out
