"""Paged decode attention: a Triton kernel, its torch reference and the backend a model calls.

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
- :func:`pages_to_slots`, :func:`slots_to_pages`: convert between the two table layouts.

This package holds only what a run executes (``backend`` is what a real model's layers
call). Chapter 6's evidence about the kernel (seeded test cases, byte counts, the roofline,
compile resources, baselines, provenance) lives in :mod:`pagedkv.lessons.kernel`, which
imports this package, never the other way round.
"""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# Only now import the modules that import triton.
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

__all__ = [
    "paged_decode_attention",
    "paged_decode_attention_by_page",
    "paged_decode_attention_ref",
    "pages_to_slots",
    "slots_to_pages",
    "split_ranges",
]
