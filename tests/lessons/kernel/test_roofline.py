"""Occupancy, register budgets, the bandwidth roofs and the split count, on hand-checked numbers."""

from __future__ import annotations

import pytest

import pagedkv.layers.attention  # noqa: F401  (sets TRITON_INTERPRET before triton loads)
from pagedkv.errors import ConfigError
from pagedkv.layers.attention.decode_attention import default_num_kv_splits
from pagedkv.lessons.kernel.roofline import (
    TargetGPU,
    occupancy,
    predict,
    predict_decode,
    register_budget,
    target_gpus,
)

H200 = TargetGPU("H200", 90, 132, 1.98e9, 4.8e12)
STAGE1 = {"arch": 90, "registers": 80, "shared_bytes": 39168, "num_warps": 4,
          "loop_instructions": 300, "loop_ops": {"FFMA": 0, "MUFU": 6}}


def test_occupancy_by_hand() -> None:
    # 80 regs -> 2560 per warp -> 10240 per program: 6 fit; (39168 + 1024 reserved) bytes of
    # shared memory into 228 KiB: 5 fit.
    assert occupancy(80, 39168, 4, 90) == (5, "shared memory")
    # 207 regs -> 6656 per warp (blocks of 256) -> 26624 per program: 2 fit in 65536.
    assert occupancy(207, 24576, 4, 75) == (2, "registers")
    assert occupancy(32, 0, 8, 89) == (6, "warps")  # 48 warps per SM on sm_89
    assert occupancy(16, 0, 1, 90) == (32, "blocks")
    with pytest.raises(ConfigError, match="arch=86"):
        occupancy(64, 0, 4, 86)


def test_register_budget_by_hand() -> None:
    assert register_budget(80, 4, 4) == 128  # 65536 / (16 warps * 32 threads)
    assert register_budget(90, 5, 4) == 96  # 3276 per warp, down to 3072 = 96 * 32
    assert register_budget(75, 2, 4) == 255  # 256 would fit; the ISA's cap is 255


def test_a_full_batch_is_memory_bound_and_a_lone_request_latency_bound() -> None:
    full = predict(H200, STAGE1, programs=512, tile_bytes=16384)
    assert full.issue == pytest.approx(132 * 1.98e9 * 16384 / 300)  # 300 issue slots a tile
    assert full.latency == pytest.approx(512 * 2 * 16384 / 1e-6)  # two tiles in flight each
    assert (full.ceiling, full.bound) == (4.8e12, "memory")
    assert full.resident_per_sm == pytest.approx(512 / 132)
    lone = predict(H200, STAGE1, programs=8, tile_bytes=16384)
    assert lone.latency == pytest.approx(8 * 2 * 16384 / 1e-6)
    assert lone.bound == "latency"
    with pytest.raises(ConfigError, match="stage1"):
        predict(H200, {**STAGE1, "arch": 80}, programs=8, tile_bytes=16384)


def test_fp32_fma_pipe_can_set_the_issue_roof() -> None:
    fma = {**STAGE1, "loop_instructions": 1700, "loop_ops": {"FFMA": 1026, "MUFU": 6}}
    a100 = TargetGPU("A100", 80, 108, 1.41e9, 2.039e12)
    # 64 lanes: 2 warp-FMAs a clock, so 1026 * 4 / 2 = 2052 clocks beat 1700 * 4 / 4.
    assert predict(a100, {**fma, "arch": 80}, 512, 16384).issue == pytest.approx(
        108 * 1.41e9 * 16384 / 2052)


def test_target_gpus_cover_every_compile_target() -> None:
    assert {g.arch for g in target_gpus()} == {75, 80, 89, 90}
    assert next(g for g in target_gpus() if g.label == "H200").hbm_bandwidth == 4.8e12


@pytest.mark.parametrize(("batch", "max_len", "sms", "arch", "want"), [
    (64, 4096, 132, 90, 1),  # 512 programs; 660 fit in one wave, 1024 would not
    (16, 4096, 132, 90, 5),  # 128 programs * 5 = 640 <= 660
    (1, 4096, 132, 90, 16),  # capped
    (1, 100, 132, 90, 4),  # one 32-token tile per split at least
    (1, 4096, 84, 86, 16),  # an arch without an entry plans for 2 per SM: 168 // 8 = 21
    (64, 4096, 58, 89, 1),
])
def test_default_split_count(batch: int, max_len: int, sms: int, arch: int, want: int) -> None:
    assert default_num_kv_splits(batch, 8, 4, max_len, sm_count=sms, arch=arch) == want


def test_split_count_is_one_under_the_interpreter_and_checks_its_inputs() -> None:
    assert default_num_kv_splits(1, 8, 4, 4096) == 1  # the CPU interpreter runs programs in turn
    with pytest.raises(ConfigError, match="sm_count=0"):
        default_num_kv_splits(1, 8, 4, 4096, sm_count=0, arch=90)
    with pytest.raises(ConfigError, match="batch=0"):
        default_num_kv_splits(0, 8, 4, 4096, sm_count=1, arch=90)


def test_predict_decode_plans_the_splits_and_picks_the_compiled_row() -> None:
    rows = [{**STAGE1, "kernel": "stage1 per-page", "dtype": "bfloat16", "page_size": 16,
             "dot_fp32": False, "purpose": "benchmark"}]
    p = predict_decode(rows, H200, batch=16, context=4096)
    assert (p.num_splits, p.programs) == (5, 640)  # 16 requests * 8 KV heads * 5 splits
    assert p.latency == pytest.approx(640 * 2 * 16384 / 1e-6)
    with pytest.raises(ConfigError, match=r"sm_90 bfloat16 page 16 \(dot_fp32=True\)"):
        predict_decode(rows, H200, batch=16, context=4096, dot_fp32=True)
