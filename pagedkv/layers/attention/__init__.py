"""Paged decode attention: a Triton kernel, its torch reference and a small model path.

On a machine without CUDA this package sets ``TRITON_INTERPRET=1`` *before* importing
triton, so the same kernels run on the CPU through Triton's interpreter (slow, but exact
enough to check against the reference). The variable must be set before triton is first
imported: import ``pagedkv.layers.attention`` before anything else that imports triton
(transformers does), or export ``TRITON_INTERPRET=1``; otherwise a launch raises
:class:`pagedkv.errors.PagedKVError` saying so.

Public API:

- :func:`paged_decode_attention`: per-token gather through ``req_to_token`` (SGLang's
  Triton backend; its FlashInfer backend also indexes per token).
- :func:`paged_decode_attention_by_page`: one page id per page (SGLang's FA3/FA4 table).
- :func:`paged_decode_attention_ref`: the same maths in plain torch.
- :func:`split_ranges`: the token range of each split-KV chunk.
- :func:`random_decode_case`: seeded inputs on a shuffled pool (tests, book, benchmark).
- :func:`pages_to_slots`, :func:`slots_to_pages`: convert between the two table layouts.

``pagedkv.model_executor.paged_llama.PagedLlamaRunner`` (imported on its own: it needs transformers)
runs a Hugging Face Llama with pagedkv's pools, allocator and this kernel.
"""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# Only now import the modules that import triton.
from pagedkv.layers.attention.cases import DecodeCase, random_decode_case
from pagedkv.layers.attention.decode_attention import (
    paged_decode_attention,
    paged_decode_attention_by_page,
    split_ranges,
)
from pagedkv.layers.attention.reference import (
    paged_decode_attention_ref,
    pages_to_slots,
    slots_to_pages,
)
from pagedkv.layers.attention.traffic import decode_bytes

__all__ = [
    "DecodeCase",
    "decode_bytes",
    "paged_decode_attention",
    "paged_decode_attention_by_page",
    "paged_decode_attention_ref",
    "pages_to_slots",
    "random_decode_case",
    "slots_to_pages",
    "split_ranges",
]
