"""The kernel against the torch reference on random layouts (hypothesis; skipped without it)."""

from __future__ import annotations

import pytest
import torch

from pagedkv.layers.attention import (
    paged_decode_attention,
    paged_decode_attention_ref,
)
from pagedkv.lessons.kernel import random_decode_case

pytestmark = pytest.mark.slow  # hypothesis cases through Triton's interpreter

hypothesis = pytest.importorskip("hypothesis")  # optional: only this file needs it
st = pytest.importorskip("hypothesis.strategies")
given, settings = hypothesis.given, hypothesis.settings

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # CPU: Triton's interpreter


@settings(max_examples=6, deadline=None)
@given(
    lens=st.lists(st.integers(1, 50), min_size=1, max_size=3),
    page_size=st.sampled_from([1, 4, 16]),
    group=st.sampled_from([1, 4, 8]),
    seed=st.integers(0, 2**16),
)
def test_random_layouts(lens: list[int], page_size: int, group: int, seed: int) -> None:
    case = random_decode_case(lens, num_q_heads=group, num_kv_heads=1, head_dim=64,
                              page_size=page_size, seed=seed, device=DEVICE)
    ref = paged_decode_attention_ref(*case.slot_args())
    out = paged_decode_attention(*case.slot_args())
    assert (out - ref).abs().max().item() <= case.tolerance(ref)
