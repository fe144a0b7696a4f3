"""``pagedkv size`` on every preset: three GPU presets and two tp sizes each, literal answers.

The answers in ``preset_answers.json`` are checked against SGLang 0.5.23's own sizing code
(``tests/reference/test_preset_sglang_answers.py``: its ``KVCacheConfigurator`` and pools, with the
start-up lines); this test holds pagedkv to them without SGLang installed.
"""

import json
from pathlib import Path

import pytest

from pagedkv.configs.model_presets import MODEL_PRESETS
from pagedkv.errors import NotEnoughMemoryError
from pagedkv.sizing import plan_pool
from pagedkv.units import GiB

TABLE = json.loads((Path(__file__).parent / "preset_answers.json").read_text())["cases"]


def plan_case(case: dict):
    """The plan of one case (``weights_gib_per_gpu`` given for quantized checkpoints)."""
    weights = case["weights_gib_per_gpu"]
    return plan_pool(case["model"], gpu=case["gpu"], tp=case["tp"],
                     weights_bytes=None if weights is None else int(weights * GiB))


def test_every_preset_has_three_gpus_and_two_tp_sizes():
    seen = {(c["model"], c["gpu"], c["tp"]) for c in TABLE}
    for name in MODEL_PRESETS:
        assert len({g for m, g, _ in seen if m == name}) >= 3, name
        assert len({t for m, _, t in seen if m == name}) >= 2, name


@pytest.mark.parametrize("case", TABLE, ids=lambda c: f"{c['model']}-{c['gpu']}-tp{c['tp']}")
def test_preset_answer(case):
    answer = case["answer"]
    if "error" in answer:
        with pytest.raises(NotEnoughMemoryError) as err:
            plan_case(case)
        assert str(err.value).split(":")[0].split(".")[0] == answer["error"]
        return
    plan = plan_case(case)
    assert {"mem_fraction_static": plan.mem_fraction_static,
            "max_total_num_tokens": plan.max_total_num_tokens,
            "swa_max_total_num_tokens": plan.swa_max_total_num_tokens,
            "max_mamba_cache_size": plan.mamba_slots or None,
            "max_running_requests": plan.max_running_requests} == answer
