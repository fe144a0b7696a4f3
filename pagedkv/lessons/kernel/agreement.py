"""Agreement checks chapter 6 runs: kernels against the torch reference, split-KV against one
split, and the paged Llama runner against transformers' own greedy ``generate``."""

from __future__ import annotations

import torch
from torch import nn

from pagedkv.layers.attention.decode_attention import paged_decode_attention, paged_decode_attention_by_page
from pagedkv.layers.attention.reference import paged_decode_attention_ref
from pagedkv.lessons.kernel.cases import random_decode_case


def kernel_errors(lens: list[int], dtype: torch.dtype, device: str = "cpu", seed: int = 0,
                  **shape: int) -> tuple[float, float, float]:
    """Max absolute difference of the per-token and the per-page kernel against the torch
    reference on :func:`random_decode_case` (``shape``: its head and page arguments), and
    the bound both must stay under (``DecodeCase.tolerance``)."""
    case = random_decode_case(lens, dtype=dtype, device=device, seed=seed, **shape)
    ref = paged_decode_attention_ref(*case.slot_args())
    by_token = paged_decode_attention(*case.slot_args()).float()
    by_page = paged_decode_attention_by_page(*case.page_args()).float()
    return (float((by_token - ref.float()).abs().max()),
            float((by_page - ref.float()).abs().max()), case.tolerance(ref))


def split_differences(lens: list[int], splits: tuple[int, ...], device: str = "cpu",
                      seed: int = 1, **shape: int) -> dict[int, float]:
    """Max absolute difference between ``num_kv_splits=s`` and one split, per ``s``."""
    case = random_decode_case(lens, device=device, seed=seed, **shape)
    one = paged_decode_attention(*case.slot_args(), num_kv_splits=1)
    return {s: float((paged_decode_attention(*case.slot_args(), num_kv_splits=s) - one)
                     .abs().max()) for s in splits}


def tiny_llama(device: str = "cpu", seed: int = 0) -> nn.Module:
    """A random ``LlamaForCausalLM`` small enough for the CPU: vocab 256, hidden 64, 2 layers,
    4 query heads sharing 2 KV heads of 16, in eval mode. Needs transformers."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         head_dim=16, initializer_range=0.2)
    return LlamaForCausalLM(config).eval().to(device)


def transformers_greedy(model: nn.Module, prompts: list[list[int]],
                        max_new_tokens: int) -> list[list[int]]:
    """Each prompt's ``max_new_tokens`` greedy tokens from the model's own ``generate``, with
    no stop token (so the count matches ``PagedLlamaRunner.generate``)."""
    device = next(model.parameters()).device
    out = []
    for prompt in prompts:
        ids = torch.tensor([prompt], device=device)
        gen = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                             max_new_tokens=max_new_tokens, min_new_tokens=max_new_tokens,
                             pad_token_id=0, eos_token_id=None)
        out.append(gen[0, len(prompt):].tolist())
    return out
