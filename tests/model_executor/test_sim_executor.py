"""The roofline step-time model on today's model families: a mixture of experts reads only the
experts its tokens are routed to and computes with its active parameters, a sliding-window
layer reads at most the window, a linear-attention layer reads and writes each request's
state; a dense model's times are the formulas they always were."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pagedkv.configs.mamba_utils import gdn_cache_params
from pagedkv.configs.model_config import ModelSpec
from pagedkv.configs.model_presets import load_model
from pagedkv.entrypoints.simulation import roofline_step_time, simulated_engine
from pagedkv.errors import ConfigError
from pagedkv.gpus import get_gpu
from pagedkv.model_executor.forward_batch_info import ForwardBatch
from pagedkv.model_executor.sim_executor import RooflineStepTime, RoutedExperts, SimExecutor
from pagedkv.sizing import plan_pool

#: A tiny Mixtral: 2 layers of 4 experts, 2 per token, hidden 16, expert MLP 32, vocab 10.
TINY_MOE = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
            "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 2,
            "num_attention_heads": 2, "num_key_value_heads": 1, "num_local_experts": 4,
            "num_experts_per_tok": 2, "vocab_size": 10, "max_position_embeddings": 64,
            "tie_word_embeddings": False, "torch_dtype": "bfloat16"}

#: A tiny Qwen3-Next: 4 layers, every 2nd full attention, so layers 0 and 2 are linear.
TINY_GDN = {"full_attention_interval": 2, "num_hidden_layers": 4, "linear_num_key_heads": 2,
            "linear_num_value_heads": 4, "linear_key_head_dim": 8, "linear_value_head_dim": 8,
            "linear_conv_kernel_dim": 4}


def decode_batch(prefix_lens: list[int]) -> ForwardBatch:
    """A decode pass whose requests hold ``prefix_lens`` tokens of KV before it."""
    n = len(prefix_lens)
    prefix = np.array(prefix_lens, dtype=np.int64)
    return ForwardBatch("decode", [None] * n, np.arange(n), prefix,  # type: ignore[list-item]
                        np.ones(n, dtype=np.int64), np.arange(n), np.ones(n, dtype=bool),
                        int(prefix.sum()))


def test_experts_touched_by_uniform_routing_hand_checked() -> None:
    """E = 4, k = 2: one token touches 2; two touch 4 * (1 - (1/2)^2) = 3; three 3.5."""
    experts = RoutedExperts(routed_bytes=800, num_experts=4, num_experts_per_tok=2)
    assert [experts.experts_touched(b) for b in (0, 1, 2, 3)] == [0.0, 2.0, 3.0, 3.5]
    assert experts.bytes_read(2) == 800 * 3 / 4 == 600.0


def test_moe_decode_reads_the_dense_part_and_the_touched_experts() -> None:
    """weights 1000 B of which 800 routed (E = 4, k = 2), cell 10 B, 100 B/s, 1 FLOP/s.

    Batch 2 reading 5 KV tokens: 200 dense + 600 routed (3 of 4 experts) + 50 KV = 850 B,
    8.5 s, against 2 * 300 active params * 2 tokens = 1200 FLOP, 1200 s at 1 FLOP/s.
    With 1e6 FLOP/s the read wins: 8.5 s. A dense model of the same bytes reads 1050 B."""
    experts = RoutedExperts(800, 4, 2)
    slow = RooflineStepTime(1000, 700, 10, 100.0, 1.0, experts=experts, active_params=300)
    assert slow.decode_s(2, 5) == 1200.0
    fast = RooflineStepTime(1000, 700, 10, 100.0, 1e6, experts=experts, active_params=300)
    assert fast.decode_s(2, 5) == 8.5
    assert RooflineStepTime(1000, 700, 10, 100.0, 1e6).decode_s(2, 5) == 10.5


def test_tiny_moe_parameters_counted_on_the_meta_device() -> None:
    """Routed: 2 layers * 4 experts * (gate + up + down: 3 * 16 * 32) = 12,288. Total: embed
    and lm_head 2 * 10 * 16 = 320, final norm 16, per layer q 16*16, k and v 16*8 each, o
    16*16 (768), 2 norms (32), router 16*4 (64) and the experts 6,144: 336 + 2 * 7,008 =
    14,352. Active: 14,352 - 12,288 + 12,288 * 2/4 = 8,208."""
    pytest.importorskip("transformers")
    spec = ModelSpec.from_config(TINY_MOE, name="tiny-moe")
    assert (spec.num_params, spec.num_routed_expert_params, spec.num_active_params) == (
        14_352, 12_288, 8_208)


def test_tiny_moe_step_time_from_its_plan() -> None:
    """The routed share of the weights is their share of the parameters: 12,288 / 14,352."""
    pytest.importorskip("transformers")
    spec = ModelSpec.from_config(TINY_MOE, name="tiny-moe")
    plan = plan_pool(spec, gpu=get_gpu("l4"), max_total_tokens=1024)
    step = roofline_step_time(spec, plan, get_gpu("l4"))
    assert step.experts == RoutedExperts(plan.weights_bytes * 12_288 // 14_352, 4, 2)
    assert (step.num_params, step.active_params) == (14_352, 8_208)


def test_a_moe_config_without_experts_per_token_is_refused() -> None:
    spec = ModelSpec.from_config({k: v for k, v in TINY_MOE.items()
                                  if k != "num_experts_per_tok"}, name="tiny-moe")
    with pytest.raises(ConfigError, match=r"num_experts_per_tok=0 is invalid or missing; "
                                          r"valid: an integer in 1..4"):
        _ = spec.num_active_params
    with pytest.raises(ConfigError, match=r"num_experts_per_tok=5 is invalid; valid: an "
                                          r"integer in 1..num_experts=4"):
        RoutedExperts(10, 4, 5)


def test_sliding_window_layers_read_at_most_the_window() -> None:
    """Full cell 10 B, window cell 30 B, window 4, 100 B/s; two requests holding 2 and 10
    tokens: full layers 12 * 10 = 120 B, window layers (2 + 4) * 30 = 180 B, weights 1000 B:
    1300 B, 13 s (FLOPs: 2 * 1 * 2 / 1e9, nothing)."""
    step = RooflineStepTime(1000, 1, 10, 100.0, 1e9, swa_cell_size=30, sliding_window=4)
    assert SimExecutor(step).forward(decode_batch([2, 10])).seconds == 13.0
    assert step.decode_s(2, 12, 6) == 13.0
    with pytest.raises(ConfigError, match=r"swa_kv_tokens=None is invalid for a model with "
                                          r"window layers"):
        SimExecutor(step).decode_seconds(2, 12)
    with pytest.raises(ConfigError, match=r"sliding_window=None is invalid; valid: an "
                                          r"integer >= 1 when swa_cell_size=30 > 0"):
        RooflineStepTime(1000, 1, 10, 100.0, 1e9, swa_cell_size=30)


def test_gpt_oss_step_time_has_its_window_and_both_cells() -> None:
    spec = load_model("gpt-oss-20b")
    card = get_gpu("h100-sxm-80gb")
    plan = plan_pool(spec, gpu=card, weights_bytes=13 << 30)
    step = roofline_step_time(spec, plan, card)
    assert (step.cell_size, step.swa_cell_size, step.sliding_window) == (24_576, 24_576, 127)
    assert step.experts is not None and step.experts.experts_touched(1) == 4.0


def test_linear_attention_state_read_and_written_every_decode_step() -> None:
    """Tiny GDN, tp 1: layers 0 and 2 linear. conv_dim = 4 * 8 + 2 * 2 * 8 = 64, a (64, 3)
    bf16 window: 384 B; recurrent (4, 8, 8) fp32: 1024 B; per request 2 * 1408 = 2816 B.
    A decode of 3 reading 0 KV tokens with 1000 B of weights at 100 B/s: 1000 + 2 * 2816 * 3
    = 17,896 B, 178.96 s. A prefill leaves the state out: 10 s."""
    params = gdn_cache_params(TINY_GDN, 1)
    assert (params.conv_bytes_per_req, params.temporal_bytes_per_req) == (768, 2048)
    step = RooflineStepTime(1000, 1, 10, 100.0, 1e9, state_bytes=params.mamba_cache_per_req)
    assert step.decode_s(3, 0) == 17_896 / 100.0
    assert step.prefill_s(3, 0) == 10.0


def test_qwen3_next_step_time_carries_its_state_bytes() -> None:
    engine = simulated_engine(model="qwen3-next-80b-a3b", gpu="h200-141gb", tp=4,
                              radix_cache=False)
    step = engine.executor.step_time
    assert isinstance(step, RooflineStepTime)
    assert step.state_bytes == engine.plan.state_bytes == 19_316_736 and step.sliding_window is None
    assert step.cell_size == load_model("qwen3-next-80b-a3b").cell_size(tp=4)


def test_mla_reads_the_latent_cell() -> None:
    """DeepSeek-V3: (512 + 64) * 61 layers * 2 bytes = 70,272 B per token, tp or not."""
    spec = load_model("deepseek-v3")
    card = get_gpu("h200-141gb")
    plan = plan_pool(spec, gpu=card, tp=8, weights_bytes=85 << 30)
    assert roofline_step_time(spec, plan, card).cell_size == 70_272


@pytest.mark.parametrize("model", ["llama-3-8b", "gemma-2-9b", "qwen3-4b"])
def test_a_dense_model_step_time_is_unchanged(model: str) -> None:
    """A dense model's step time has none of the families' fields: the same object as the
    three-size roofline, hence the same times to the bit."""
    spec, card = load_model(model), get_gpu("h100-sxm-80gb")
    plan = plan_pool(spec, gpu=card)
    step = roofline_step_time(spec, plan, card)
    assert step == RooflineStepTime(plan.weights_bytes, spec.num_params, plan.cell_size,
                                    card.hbm_bandwidth, card.bf16_flops)
    kv = 123_457
    assert step.decode_s(17, kv) == max((plan.weights_bytes + kv * plan.cell_size)
                                        / card.hbm_bandwidth,
                                        2.0 * spec.num_params * 17 / card.bf16_flops)


@given(e=st.integers(1, 512), data=st.data())
def test_experts_touched_grows_with_tokens_and_stays_within_bounds(e: int, data) -> None:
    k = data.draw(st.integers(1, e))
    b = data.draw(st.integers(1, 10_000))
    experts = RoutedExperts(10**9, e, k)
    touched = experts.experts_touched(b)
    assert experts.experts_touched(b + 1) >= touched
    assert k - 1e-9 <= touched <= min(e, k * b) + 1e-9


@given(batch=st.integers(1, 4096), kv=st.integers(0, 10**7), more=st.integers(0, 10**5),
       window=st.integers(1, 10**5), lens=st.lists(st.integers(0, 10**5), min_size=1,
                                                  max_size=64))
def test_step_times_grow_with_batch_and_kv_and_families_read_less(batch, kv, more, window,
                                                                   lens) -> None:
    experts = RoutedExperts(6 * 10**9, 64, 4)
    moe = RooflineStepTime(8 * 10**9, 10**10, 4096, 3.35e12, 989e12, experts=experts,
                           active_params=10**9, state_bytes=10**6)
    assert moe.decode_s(batch + 1, kv) >= moe.decode_s(batch, kv)
    assert moe.decode_s(batch, kv + more) >= moe.decode_s(batch, kv)
    assert moe.prefill_s(batch + 1, kv) >= moe.prefill_s(batch, kv)
    dense = RooflineStepTime(8 * 10**9, 10**10, 4096, 3.35e12, 989e12, state_bytes=10**6)
    assert moe.decode_s(batch, kv) <= dense.decode_s(batch, kv)
    swa = RooflineStepTime(8 * 10**9, 10**10, 4096, 3.35e12, 989e12, swa_cell_size=4096,
                           sliding_window=window)
    clipped = SimExecutor(swa).forward(decode_batch(lens)).seconds
    unclipped = swa.decode_s(len(lens), sum(lens), sum(lens))
    assert clipped <= unclipped
    wider = RooflineStepTime(8 * 10**9, 10**10, 4096, 3.35e12, 989e12, swa_cell_size=4096,
                             sliding_window=window + 1)
    assert SimExecutor(wider).forward(decode_batch(lens)).seconds >= clipped


@pytest.mark.parametrize("rate", [0.0, -1.0, float("nan"), float("inf")])
def test_a_rate_that_is_not_positive_and_finite_is_refused(rate: float) -> None:
    with pytest.raises(ConfigError, match=r"hbm_bandwidth=.* is invalid; valid: a positive, "
                                          r"finite rate"):
        RooflineStepTime(1, 1, 1, rate, 1.0)
