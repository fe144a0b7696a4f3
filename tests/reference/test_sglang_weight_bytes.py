"""The quantized presets' weights as SGLang 0.5.23 allocates them: its own model classes built
on the meta device (:mod:`weights_sglang`) against the table pagedkv ships
(``pagedkv/presets/models/sglang_weight_bytes.json``), which fails when it is stale (the bytes,
and the tp sizes SGLang refuses to build, with its message); and the method checked on
gpt-oss-20b, whose checkpoint index total is known."""

from __future__ import annotations

import json
import re

import pytest
import sgl_boot

if sgl_boot.VERSION != "0.5.23":
    pytest.skip("the shipped weight bytes are SGLang 0.5.23's", allow_module_level=True)
sgl_boot.require()

import weights_sglang  # noqa: E402

from pagedkv.configs.model_presets import load_model  # noqa: E402
from pagedkv.errors import ConfigError  # noqa: E402
from pagedkv.weights import preset_checkpoint_bytes  # noqa: E402

SHIPPED = json.loads(weights_sglang.SHIPPED.read_text())


def test_the_shipped_table_is_sglangs_own_count():
    """Regenerate with ``python tests/reference/weights_sglang.py`` in the 0.5.23 venv."""
    assert weights_sglang.table() == SHIPPED


def test_gpt_oss_20b_matches_its_checkpoint_index_to_the_byte():
    # SGLang's mxfp4 experts (uint8 blocks and scales, bf16 biases) and bf16 elsewhere hold
    # exactly the tensors the checkpoint stores: 13,761,264,768 B
    model = weights_sglang.build_model(weights_sglang.preset_config("gpt-oss-20b"))
    assert weights_sglang.weight_bytes(model)["total"] == preset_checkpoint_bytes()["gpt-oss-20b"]


def test_deepseek_builds_no_multi_token_prediction_layer():
    model = weights_sglang.build_model(weights_sglang.preset_config("deepseek-v3"))
    layers = {int(n.split(".")[2]) for n, _ in model.named_parameters() if n.startswith("model.layers.")}
    assert layers == set(range(61))  # config num_hidden_layers 61; layer 61 is the MTP layer


@pytest.mark.parametrize("name", ["gpt-oss-120b", "deepseek-v3", "deepseek-v3.2", "kimi-k2"])
def test_pagedkv_sizes_the_preset_with_them(name):
    spec = load_model(name)
    for tp, size in SHIPPED[name]["per_rank"].items():
        assert spec.weight_bytes(int(tp)) == size, (name, tp)
    for tp, message in SHIPPED[name]["refused"].items():  # SGLang's own reason, named
        with pytest.raises(ConfigError, match=f"at tp={tp}: .*{re.escape(message)}"):
            spec.weight_bytes(int(tp))


def test_every_tp_pagedkv_accepts_up_to_32_was_tried():
    for name in weights_sglang.QUANTIZED_PRESETS:
        tried = SHIPPED[name]["tp_tried"]
        assert tried == [1, 2, 4, 8, 16, 32]  # 64 or 128 query heads: their powers of two
        assert sorted(map(int, [*SHIPPED[name]["per_rank"], *SHIPPED[name]["refused"]])) == tried


def test_deepseek_fp8_has_no_tp_32():
    # the dense layers' gate and up projections at tp 32 are 18432 / 32 = 576 rows each per
    # rank: not a multiple of the fp8 checkpoint's 128-row blocks, which Fp8LinearMethod refuses
    # (DeepSeek-V3, V3.2 and Kimi-K2 share intermediate_size 18432); pagedkv refuses them too
    for name in ("deepseek-v3", "deepseek-v3.2", "kimi-k2"):
        with pytest.raises(ValueError, match="576 is not divisible by weight quantization block_n"):
            weights_sglang.build_model(weights_sglang.preset_config(name), 32, 0)
        assert list(SHIPPED[name]["refused"]) == ["32"]
