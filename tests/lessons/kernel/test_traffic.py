"""pagedkv.lessons.kernel.traffic and .agreement: chapter 6's arithmetic and checks."""

from __future__ import annotations

import pytest
import torch

import pagedkv.layers.attention  # noqa: F401  (sets TRITON_INTERPRET before triton loads)
from pagedkv.errors import ConfigError
from pagedkv.lessons.kernel.agreement import kernel_errors, split_differences
from pagedkv.lessons.kernel.traffic import decode_traffic, table_bytes, within


def test_decode_traffic_llama3_8b() -> None:
    t = decode_traffic(batch=64, context=4096, layers=32, num_q_heads=32, num_kv_heads=8,
                       head_dim=128, elem_bytes=2)
    kv = 2 * 64 * 4096 * 8 * 128 * 2  # K and V per layer
    qo = 2 * 64 * 32 * 128 * 2  # q and o per layer
    assert t.per_layer == kv + qo == 1_074_790_400
    assert t.per_step == 32 * t.per_layer
    assert t.flops == 32 * 4 * 64 * 4096 * 32 * 128
    assert t.flops_per_byte == pytest.approx(t.flops / t.per_step)
    assert t.min_seconds(1e12) == pytest.approx(t.per_step / 1e12)
    with pytest.raises(ConfigError, match="batch"):
        decode_traffic(0, 1, 1, 1, 1, 1, 2)


def test_table_bytes() -> None:
    assert table_bytes(64, 4096, 1) == 64 * 4096 * 4
    assert table_bytes(64, 4096, 16) == 64 * 256 * 4
    assert table_bytes(2, 100, 64) == 2 * 2 * 4  # ceil(100 / 64) = 2 pages


def test_within() -> None:
    assert within(None, 100) == "no answer yet"
    assert within(101, 100) == "correct"
    assert within(102, 100).startswith("not yet")


def test_agreement_checks_small() -> None:
    shape = dict(num_q_heads=4, num_kv_heads=2, head_dim=16, page_size=4)
    per_token, per_page, bound = kernel_errors([3, 9], torch.float32, seed=0, **shape)
    assert per_token <= bound and per_page <= bound
    assert bound < 1e-4  # fp32 rounds no weights: only fp32 sums and exp remain
    diffs = split_differences([40, 5], (2,), seed=1, **shape)
    assert list(diffs) == [2] and diffs[2] < 1e-5
