"""Chapter 9's examples: every pool of one GPU adds up to the card, the request cap counts
every pool and the state slots, and the figure draws every model on every card."""

from __future__ import annotations

import pytest

from pagedkv.configs.model_presets import load_model
from pagedkv.errors import NotEnoughMemoryError
from pagedkv.gpus import get_gpu
from pagedkv.lessons.todays_models import (
    EXAMPLES,
    FIGURE_GPUS,
    SEGMENTS,
    cap_at,
    decode_read,
    example_plan,
    figure_splits,
    hbm_split,
)


@pytest.mark.parametrize("name", EXAMPLES)
def test_the_pools_of_one_gpu_add_up_to_the_card(name: str) -> None:
    plan = example_plan(name)
    split = hbm_split(plan)
    assert tuple(split) == SEGMENTS and sum(split.values()) == plan.pre_free_bytes
    assert all(v >= 0 for v in split.values())
    assert split["full KV"] == plan.max_total_num_tokens * plan.cell_size
    assert (split["SWA KV"] > 0) == plan.is_swa
    assert (split["state slots"] > 0) == bool(plan.mamba_slots)
    if plan.mamba_slots:  # the usable slots and the padding slot, as the start-up line counts
        assert split["state slots"] == (plan.mamba_slots + 1) * plan.state_bytes


def test_quantized_checkpoints_weigh_what_sglang_allocates_per_gpu() -> None:
    # SGLang 0.5.23's own model classes on the meta device (sglang_weight_bytes.json)
    assert example_plan("gpt-oss-120b").weights_bytes == 65_248_815_744  # tp 1
    assert example_plan("deepseek-v3").weights_bytes == 85_140_131_824  # one of 8 GPUs


def test_the_cap_counts_the_state_slots_and_the_kv_pool() -> None:
    qn = example_plan("qwen3-next-80b-a3b")
    # the radix cache, its default extra_buffer strategy: 3 slots each + 2 track slots
    assert qn.max_running_requests == qn.mamba_slots // 5
    assert cap_at(qn, 2048) == qn.max_running_requests < qn.max_total_num_tokens // 2048
    assert cap_at(qn, 32768) == qn.max_total_num_tokens // 32768
    one_slot = example_plan("qwen3-next-80b-a3b", disable_radix_cache=True)
    assert one_slot.mamba_slots == qn.mamba_slots == one_slot.max_running_requests
    assert cap_at(one_slot, 2048) == one_slot.max_total_num_tokens // 2048


def test_batch_cap_of_a_linear_attention_hybrid_counts_five_slots_a_request() -> None:
    # B_max at a short context was the slot count (2,338), five times what SGLang runs
    # (3 slots a request and the two track slots of the radix cache's default strategy)
    from dataclasses import replace
    qn = example_plan("qwen3-next-80b-a3b")
    assert replace(qn, context_len=2048).batch_cap == qn.max_running_requests == 2338 // 5
    one_slot = example_plan("qwen3-next-80b-a3b", disable_radix_cache=True)
    assert replace(one_slot, context_len=2048).batch_cap == one_slot.max_total_num_tokens // 2048


def test_the_window_gives_the_full_layers_more_tokens() -> None:
    split = example_plan("gpt-oss-120b")
    one_pool = example_plan("gpt-oss-120b", model=load_model("gpt-oss-120b", True))
    assert one_pool.cell_size == split.cell_size + split.swa_cell_size
    assert split.max_total_num_tokens > one_pool.max_total_num_tokens
    low = example_plan("gpt-oss-120b", swa_full_tokens_ratio=0.2)
    assert low.max_total_num_tokens > split.max_total_num_tokens
    assert cap_at(split, split.context_len) == 0  # one H100 cannot hold a whole sequence


def test_figure_covers_every_model_on_every_card() -> None:
    splits = figure_splits()
    assert set(splits) == set(EXAMPLES)
    assert all(set(by_gpu) == set(FIGURE_GPUS) for by_gpu in splits.values())
    assert splits["deepseek-v3"]["h100-sxm-80gb"] is None
    with pytest.raises(NotEnoughMemoryError):
        example_plan("deepseek-v3", "h100-sxm-80gb")


def test_pools_figure_has_one_menu_entry_per_model() -> None:
    from pagedkv_widgets.pool_figures import pools_figure

    fig = pools_figure()
    assert len(fig.data) == len(EXAMPLES) * len(SEGMENTS)
    buttons = fig.layout.updatemenus[0].buttons
    assert len(buttons) == len(EXAMPLES)
    for mi, button in enumerate(buttons):
        shown = [i for i, v in enumerate(button.args[0]["visible"]) if v]
        assert shown == list(range(mi * len(SEGMENTS), (mi + 1) * len(SEGMENTS)))
    assert "H100 (no start)" in fig.data[2 * len(SEGMENTS)].y


@pytest.mark.parametrize("name", ["gpt-oss-120b", "qwen3-next-80b-a3b", "mixtral-8x7b"])
def test_decode_read_parts_add_up_to_the_step_time(name: str) -> None:
    """The bytes a decode step reads, part by part, over the card's bandwidth are its time
    (these steps are memory-bound), and a bigger batch touches more experts."""
    one, many = decode_read(name, 1, 2048), decode_read(name, 64, 2048)
    bandwidth = get_gpu(EXAMPLES[name].gpu).hbm_bandwidth
    for read in (one, many):
        total = read.weights_bytes + read.kv_bytes + read.state_bytes
        assert read.seconds == pytest.approx(total / bandwidth, rel=1e-12)
    assert load_model(name).num_experts_per_tok == one.experts_touched < many.experts_touched
    assert (one.state_bytes > 0) == (name == "qwen3-next-80b-a3b")
