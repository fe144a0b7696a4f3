"""The attention a real model's layers run on the paged pool: store the new K/V, attend.

Follows SGLang's ``python/sglang/srt/layers/attention/triton_backend.py`` (``TritonAttnBackend``:
``init_forward_metadata`` once per pass, then ``forward_extend`` / ``forward_decode`` in every
layer) and ``layers/radix_attention.py`` (a layer hands its q, k, v to the backend, which
writes k, v into ``MHATokenToKVPool`` at ``out_cache_loc`` before it attends). The pool is
SGLang's ``[slots, H_kv, D]`` per layer; which slots belong to which request is read from
the rows of ``req_to_token`` the scheduler filled.

Two passes, two ways of reading the pool:

- **extend** (prefill, or a prompt's next chunk): request ``i``'s ``n_i`` new tokens sit at
  positions ``prefix_i .. prefix_i + n_i - 1``; each attends causally over all
  ``prefix_i + n_i`` tokens of its row: the cached prefix (written by an earlier pass, or by
  another request that shared it through the radix cache) and the new tokens. pagedkv gathers
  the row's K/V and calls torch's ``scaled_dot_product_attention`` once per request; SGLang
  runs one Triton kernel for the whole batch (``extend_attention.py``).
- **decode**: one new token per request, through :func:`paged_decode_attention`, the Triton
  kernel of chapter 6 (``attention_backend="torch_native"`` uses its torch reference, as
  SGLang's ``--attention-backend torch_native`` does).

No device-to-host read in a layer: :func:`init_forward_metadata` checks every index once per
pass on the host, so a layer's K/V write and its decode launch only queue work on the GPU
(SGLang's backend, which trusts its scheduler, reads nothing back either).

Where we simplify: the page table lives on the host (the scheduler's numpy bookkeeping reads
it), so each pass uploads the batch's rows as a compact ``[bs, max_seq_len]`` table; SGLang
keeps ``req_to_token`` on the GPU and builds ``kv_indices`` there. No CUDA graphs, no
sliding windows, no logit soft-capping.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch.nn import functional as F

from pagedkv.errors import bad_value
from pagedkv.layers.attention.checks import check_decode_values
from pagedkv.layers.attention.decode_attention import paged_decode_attention
from pagedkv.layers.attention.reference import paged_decode_attention_ref
from pagedkv.mem_cache.memory_pool import MHATokenToKVPool

ATTENTION_BACKENDS = ("triton", "torch_native")


@dataclass(frozen=True)
class AttentionMetadata:
    """One pass's view of the pool, built once and read by every layer.

    Attributes:
        decode: a decode pass (one new token per request) or an extend pass.
        out_cache_loc: int64 ``[T]`` on the device: the slot each new token's K/V go to,
            request after request (``T = sum(extend_lens)``).
        table: int32 ``[bs, max_seq_len]`` on the device: row ``i`` holds request ``i``'s
            slots for positions ``0 .. seq_lens[i] - 1`` (a compact copy of its
            ``req_to_token`` row; zeros past the end point at the dummy slot 0).
        rows: int64 ``[bs]`` on the device: ``0 .. bs - 1``, the rows of ``table``.
        seq_lens: int64 ``[bs]`` on the device: tokens in each request's KV after the pass.
        prefix_lens, extend_lens: the host lists the extend loop walks.
        max_seq_len: ``max(seq_lens)``, a host int (the decode kernel's split count reads
            it; reading it from the device would sync every layer).
    """

    decode: bool
    out_cache_loc: torch.Tensor
    table: torch.Tensor
    rows: torch.Tensor
    seq_lens: torch.Tensor
    prefix_lens: list[int]
    extend_lens: list[int]
    max_seq_len: int = 0


def init_forward_metadata(decode: bool, req_to_token: torch.Tensor, req_pool_indices: np.ndarray,
                          prefix_lens: np.ndarray, extend_lens: np.ndarray,
                          out_cache_loc: np.ndarray, device: torch.device, *,
                          num_slots: int) -> AttentionMetadata:
    """Check and upload what the layers of one pass need (SGLang ``init_forward_metadata``).

    Every index the layers will use is checked here, once per pass and on the host, before
    the upload: the slots the new K/V go to, and for a decode the rows, lengths and slots
    the kernel reads (:func:`~pagedkv.layers.attention.checks.check_decode_values`, the
    checks a hand-called kernel runs, with the same errors). So no layer reads a value back
    from the device: on a GPU a pass runs without a device-to-host sync until its logits.

    Args:
        decode: True for a decode pass (every ``extend_lens`` is 1).
        req_to_token: int32 ``[R, W]`` host page table (``ReqToTokenPool.req_to_token``).
        req_pool_indices, prefix_lens, extend_lens: int64 ``[bs]``: each request's row,
            tokens already in the pool, tokens computed now.
        out_cache_loc: int64 ``[sum(extend_lens)]`` slots of the new tokens.
        device: where the model runs.
        num_slots: slots in each layer's K/V buffer (pool size plus its dummy page).

    Raises:
        ConfigError: a row shorter than a request's sequence, ``out_cache_loc`` of the
            wrong length or outside the pool, or (decode) a row, length or slot the kernel
            would read outside its table or the pool.
    """
    seq = (np.asarray(prefix_lens) + np.asarray(extend_lens)).astype(np.int64)
    loc = np.asarray(out_cache_loc, dtype=np.int64)
    if len(loc) != int(np.sum(extend_lens)):
        raise bad_value("len(out_cache_loc)", len(loc),
                        f"sum(extend_lens)={int(np.sum(extend_lens))}")
    if len(loc) and (int(loc.min()) < 0 or int(loc.max()) >= num_slots):
        raise bad_value("out_cache_loc", loc.tolist(), f"slots in [0, {num_slots})")
    width = int(seq.max()) if len(seq) else 0
    if width > req_to_token.shape[1]:
        raise bad_value("seq_lens", seq.tolist(), f"at most {req_to_token.shape[1]} (the row width)")
    rows = torch.as_tensor(np.asarray(req_pool_indices, dtype=np.int64))
    table = req_to_token[rows, :width].contiguous()
    compact_rows, seq_lens = torch.arange(len(seq), dtype=torch.int64), torch.as_tensor(seq)
    if decode and len(seq):  # host tensors: these reads cost no device sync
        check_decode_values(table, compact_rows, seq_lens, num_slots)
    return AttentionMetadata(
        decode=decode,
        out_cache_loc=torch.as_tensor(loc).to(device),
        table=table.to(device),
        rows=compact_rows.to(device),
        seq_lens=seq_lens.to(device),
        prefix_lens=[int(x) for x in prefix_lens],
        extend_lens=[int(x) for x in extend_lens],
        max_seq_len=width)


def paged_attention(pool: MHATokenToKVPool, layer_id: int, q: torch.Tensor, k: torch.Tensor,
                    v: torch.Tensor, meta: AttentionMetadata, scale: float,
                    backend: str = "triton") -> torch.Tensor:
    """Store the new tokens' K/V in layer ``layer_id`` of the pool, then attend.

    Args:
        pool: the KV pool (its buffers on the model's device, in the model's dtype).
        layer_id: the layer.
        q: ``[T, H_q, D]`` queries of the new tokens (after rotary embedding).
        k, v: ``[T, H_kv, D]`` their keys (after rotary embedding) and values.
        meta: the pass (:func:`init_forward_metadata`).
        scale: softmax scale (the model's ``attn.scaling``, usually ``D ** -0.5``).
        backend: decode attention: ``"triton"`` (the paged kernel) or ``"torch_native"``.

    Returns:
        ``[T, H_q, D]`` attention output in q's dtype.

    Source: ``RadixAttention.forward`` and ``TritonAttnBackend.forward_extend`` /
    ``forward_decode`` (``set_kv_buffer`` first, then the kernel).
    """
    # the slots and, for a decode, the table were checked once for the pass (no device read)
    pool.set_kv_buffer(layer_id, meta.out_cache_loc, k, v, check_loc=False)
    k_cache, v_cache = pool.get_key_buffer(layer_id), pool.get_value_buffer(layer_id)
    if meta.decode:
        if backend == "triton":
            return paged_decode_attention(q, k_cache, v_cache, meta.table, meta.rows,
                                          meta.seq_lens, sm_scale=scale,
                                          max_seq_len=meta.max_seq_len)
        return paged_decode_attention_ref(q, k_cache, v_cache, meta.table, meta.rows,
                                          meta.seq_lens, sm_scale=scale)
    return _extend(q, k_cache, v_cache, meta, scale)


def _extend(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
            meta: AttentionMetadata, scale: float) -> torch.Tensor:
    """Causal attention of each request's new tokens over its whole row, one SDPA call per
    request. ``q`` ``[T, H_q, D]``; returns ``[T, H_q, D]``."""
    out = torch.empty_like(q)
    start = 0
    for i, (prefix, n) in enumerate(zip(meta.prefix_lens, meta.extend_lens, strict=True)):
        seq = prefix + n
        slots = meta.table[i, :seq].long()
        keys = k_cache[slots].transpose(0, 1)[None]  # [1, H_kv, seq, D]
        values = v_cache[slots].transpose(0, 1)[None]
        query = q[start:start + n].transpose(0, 1)[None]  # [1, H_q, n, D]
        if prefix == 0:  # a plain causal square: let SDPA pick its fastest kernel
            o = F.scaled_dot_product_attention(query, keys, values, is_causal=True, scale=scale,
                                               enable_gqa=True)
        else:  # query j sits at position prefix + j and sees keys 0 .. prefix + j
            q_pos = torch.arange(prefix, seq, device=q.device)
            mask = torch.arange(seq, device=q.device)[None, :] <= q_pos[:, None]
            o = F.scaled_dot_product_attention(query, keys, values, attn_mask=mask, scale=scale,
                                               enable_gqa=True)
        out[start:start + n] = o[0].transpose(0, 1)
        start += n
    return out
