"""The Llama family's forward pass with its attention on pagedkv's pool.

A Hugging Face ``LlamaForCausalLM`` (and the models built the same way: Mistral, Qwen2 /
Qwen2.5, Qwen3) keeps its own modules and weights here: embeddings, RMSNorms, the rotary
embedding, the q/k/v/o projections (with Qwen2's biases and Qwen3's per-head q/k norms), the
MLP and the LM head. Only attention changes: instead of a per-request ``DynamicCache``, every
layer stores K/V in ``MHATokenToKVPool`` at the slots the scheduler's allocator handed out
and attends through :mod:`pagedkv.layers.attention.backend`. All requests of a pass are
packed into one ``[T]`` token axis (no padding), as SGLang packs them.

Follows SGLang's ``python/sglang/srt/models/llama.py`` (``LlamaForCausalLM``,
``LlamaDecoderLayer``, ``LlamaAttention``), ``qwen2.py`` and ``qwen3.py`` (the q/k norms), which
re-implement these layers with fused kernels; pagedkv calls Hugging Face's modules instead.
Where we simplify: full attention only (a sliding window is accepted only when no sequence
reaches it), no tensor parallelism, logits of the sampled positions only.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from pagedkv.errors import bad_value
from pagedkv.layers.attention.backend import AttentionMetadata, paged_attention
from pagedkv.mem_cache.memory_pool import MHATokenToKVPool

#: ``config.model_type`` values whose module layout this forward pass follows.
SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")
_ATTN = ("q_proj", "k_proj", "v_proj", "o_proj")


def check_causal_lm(model: nn.Module) -> None:
    """Refuse a model whose layers this forward pass does not know.

    Raises:
        ConfigError: an architecture outside :data:`SUPPORTED_MODEL_TYPES`, or one whose
            modules are not laid out as ``model.model.layers[i].self_attn.{q,k,v,o}_proj``.
    """
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", type(model).__name__)
    valid = (f"a Hugging Face causal LM of type {', '.join(SUPPORTED_MODEL_TYPES)} "
             "(Llama, Mistral, Qwen2/2.5, Qwen3 layouts, GQA included)")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise bad_value("model", model_type, valid)
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if (layers is None or not len(layers) or not hasattr(model, "lm_head")
            or not all(hasattr(inner, n) for n in ("embed_tokens", "norm", "rotary_emb"))
            or not all(hasattr(layer.self_attn, n) for layer in layers for n in _ATTN)):
        raise bad_value("model", type(model).__name__, valid)


def sliding_window(config: Any) -> int | None:
    """Tokens a sliding-window layer sees, or None when every layer attends to everything.

    Mistral sets ``sliding_window`` (None from v0.2 on); Qwen2/Qwen3 mark sliding layers in
    ``layer_types`` (none unless ``use_sliding_window``).
    """
    window = getattr(config, "sliding_window", None)
    if window is None:
        return None
    types = getattr(config, "layer_types", None)
    if types is not None and "sliding_attention" not in types:
        return None
    return int(window)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding of ``x`` ``[T, H, D]`` with ``cos``/``sin`` ``[T, D]`` (the
    half-split layout of Hugging Face's ``apply_rotary_pos_emb``)."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos[:, None, :] + rotated * sin[:, None, :]


def _attention(layer_id: int, attn: nn.Module, hidden: torch.Tensor,
               cos_sin: tuple[torch.Tensor, torch.Tensor], meta: AttentionMetadata,
               pool: MHATokenToKVPool, backend: str) -> torch.Tensor:
    """One layer's attention: project, (Qwen3: norm per head,) rotate, store, attend, project."""
    tokens, d = hidden.shape[0], attn.head_dim
    q = attn.q_proj(hidden).view(tokens, -1, d)
    k = attn.k_proj(hidden).view(tokens, -1, d)
    v = attn.v_proj(hidden).view(tokens, -1, d)
    if hasattr(attn, "q_norm"):  # Qwen3: RMSNorm over each head before the rotation
        q, k = attn.q_norm(q), attn.k_norm(k)
    q, k = _rotate(q, *cos_sin), _rotate(k, *cos_sin)
    out = paged_attention(pool, layer_id, q, k, v, meta, attn.scaling, backend)
    return attn.o_proj(out.reshape(tokens, -1))


def forward_hidden(model: nn.Module, input_ids: torch.Tensor, positions: torch.Tensor,
                   meta: AttentionMetadata, pool: MHATokenToKVPool,
                   backend: str = "triton") -> torch.Tensor:
    """Run the decoder over the pass's new tokens; every layer writes its K/V to the pool.

    Args:
        model: a model :func:`check_causal_lm` accepts, on the pool's device.
        input_ids: int64 ``[T]`` the new tokens of every request, request after request.
        positions: int64 ``[T]`` each token's position in its sequence.
        meta: the pass (``init_forward_metadata``); ``pool``: the KV pool.
        backend: decode attention, ``"triton"`` or ``"torch_native"``.

    Returns:
        ``[T, hidden]`` hidden states after the last layer, before the final norm.
    """
    inner = model.model
    hidden = inner.embed_tokens(input_ids)
    cos, sin = inner.rotary_emb(hidden, positions[None, :])
    cos_sin = (cos[0], sin[0])
    for layer_id, layer in enumerate(inner.layers):
        residual = hidden
        hidden = residual + _attention(layer_id, layer.self_attn, layer.input_layernorm(hidden),
                                       cos_sin, meta, pool, backend)
        hidden = hidden + layer.mlp(layer.post_attention_layernorm(hidden))
    return hidden


def logits(model: nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """float32 ``[n, vocab]`` next-token logits of ``n`` hidden states (final norm, LM head)."""
    return model.lm_head(model.model.norm(hidden)).float()
