"""The benchmark's comparisons (SDPA on contiguous K/V, a copy) and its provenance record."""

from __future__ import annotations

import pytest
import torch

import pagedkv.layers.attention  # noqa: F401  (sets TRITON_INTERPRET before triton loads)
from pagedkv.errors import ConfigError
from pagedkv.layers.attention import paged_decode_attention_ref
from pagedkv.lessons.kernel import random_decode_case
from pagedkv.lessons.kernel.baselines import (
    contiguous_kv,
    copy_bytes,
    copy_runner,
    sdpa_runner,
)
from pagedkv.lessons.kernel.provenance import environment, nvidia_smi

SHAPE = {"num_q_heads": 4, "num_kv_heads": 2, "head_dim": 16}


def test_sdpa_on_the_contiguous_copy_matches_the_reference() -> None:
    flat = random_decode_case([9, 9, 9], page_size=1, shuffle=False, seed=2, **SHAPE)
    k, v = contiguous_kv(flat)
    assert k.shape == v.shape == (3, 2, 9, 16) and k.is_contiguous()
    assert torch.equal(v[1, :, 4], flat.v_cache[flat.req_to_token[1, 4].long()])
    ref = paged_decode_attention_ref(*flat.slot_args())
    out = sdpa_runner(flat)()[:, :, 0, :]
    assert (out - ref).abs().max().item() <= flat.tolerance(ref)


def test_contiguous_kv_refuses_what_is_not_contiguous() -> None:
    with pytest.raises(ConfigError, match="shuffled"):
        contiguous_kv(random_decode_case([9, 9], page_size=1, **SHAPE))
    with pytest.raises(ConfigError, match="equal lengths"):
        contiguous_kv(random_decode_case([9, 5], page_size=1, shuffle=False, **SHAPE))


def test_copy_moves_the_k_pool_twice() -> None:
    case = random_decode_case([5], page_size=4, **SHAPE)
    assert torch.equal(copy_runner(case)(), case.k_cache)
    assert copy_bytes(case) == 2 * case.k_cache.numel() * 4  # fp32, read + write


def test_environment_without_a_gpu_names_no_gpu() -> None:
    env = environment(cuda=False)
    assert env["gpu"] is None and "interpreter" in env["device"]
    assert len(env["git"]["commit"]) == 40 and isinstance(env["git"]["dirty"], bool)
    if not torch.cuda.is_available():
        assert set(nvidia_smi().values()) == {None}  # no nvidia-smi: unknown, not invented
