"""Which attention backend and forced page size SGLang 0.5.23 picks: its own functions against
:mod:`pagedkv.lessons.attention_backends` and the book's words.

SGLang resolves the backend from the GPU it runs on (``runtime_context.get_platform``), which
this CPU is not, so each case calls SGLang's own function with the platform replaced by what a
CUDA card of that compute capability reports (FlashInfer installed, CUDA 12.3 or newer), no
speculative decoding and no backend flag given:

- ``arg_groups/model_override_base.py`` ``get_default_attn_backend`` for an MHA/GQA model with
  and without attention sinks, against ``default_attention_backend`` (a sinks model without a
  rule of its own, as MiMo-V2-Flash below sm_100, gets triton where others get flashinfer);
- ``arg_groups/model_overrides/gpt_oss.py`` ``_gpt_oss_overrides``: gpt-oss's own rule, which
  runs before the default, against ``gpt_oss_attention_backend`` (fa3 on sm_90, trtllm_mha on
  sm_100, triton on every other NVIDIA card, sm_120 included: not the generic sinks rule; aiter
  on ROCm);
- ``arg_groups/overrides.py`` ``_fa4_page_constraint``: fa4's page size 128 holds only for a
  non-MLA model on sm_100 with ``speculative_eagle_topk`` unset or at most 1, whichever backend
  flag names fa4 (``forced_page_size_when``).

0.5.9 makes the same choices inside ``ServerArgs`` methods that need a whole server's
arguments; ``tests/lessons/test_attention_backends.py`` holds its answers, hand-checked.
"""

from __future__ import annotations

from types import SimpleNamespace as NS

import sgl_boot

sgl_boot.require()
if sgl_boot.VERSION == "0.5.9":
    import pytest

    pytest.skip("0.5.9 picks the backend inside ServerArgs methods (see the module docstring)",
                allow_module_level=True)

import compare  # noqa: E402
import pytest  # noqa: E402

from pagedkv.lessons.attention_backends import (  # noqa: E402
    default_attention_backend,
    forced_page_size_when,
    gpt_oss_attention_backend,
    resolve_page_size,
)

AREA = "attention backend choice"
CARDS = (75, 80, 86, 89, 90, 100, 103, 120)  # compute capability x 10


def platform(sm: int) -> NS:
    """What ``get_platform()`` reports on a CUDA card of compute capability ``sm / 10``; sm 0:
    an AMD (ROCm) card."""
    major = sm // 10
    return NS(is_hopper_with_cuda_12_3=major == 9, is_sm90=major == 9, is_sm100=major == 10,
              is_sm120=major == 12, is_blackwell=major in (10, 12), is_hip=sm == 0, is_xpu=False,
              is_npu=False, is_musa=False, has_amx=False, has_flashinfer=True)


def server_args(**flags: object) -> NS:
    """The fields these functions read, as a server started without backend flags has them."""
    args = dict(attention_backend=None, prefill_attention_backend=None,
                decode_attention_backend=None, speculative_eagle_topk=None,
                speculative_algorithm=None, page_size=None, dtype="auto",
                moe_runner_backend="triton")  # not "auto": skips gpt-oss's MoE choice
    args.update(flags)
    return NS(**args)


@pytest.fixture
def card(monkeypatch: pytest.MonkeyPatch):
    """Set the card SGLang sees: ``card(sm)``."""
    from sglang.srt.arg_groups import model_override_base as base
    from sglang.srt.arg_groups import overrides
    from sglang.srt.arg_groups.model_overrides import gpt_oss

    same = lambda view: view  # noqa: E731 - the views only read the fields given
    for module in (base, gpt_oss):
        monkeypatch.setattr(module, "resolving_view", same)
    monkeypatch.setattr(base, "resolved_view", same)
    monkeypatch.setattr(base, "current_platform", NS(is_out_of_tree=lambda: False))
    monkeypatch.setattr(base, "is_mps", lambda: False)
    monkeypatch.setattr(gpt_oss, "is_cpu", lambda: False)

    def set_card(sm: int) -> None:
        for module in (base, gpt_oss, overrides):
            monkeypatch.setattr(module, "get_platform", lambda: platform(sm))
    return set_card


@pytest.mark.parametrize("sm", CARDS)
@pytest.mark.parametrize("sinks", [False, True])
def test_default_backend(sm: int, sinks: bool, card) -> None:
    from sglang.srt.arg_groups.model_override_base import get_default_attn_backend

    card(sm)
    model = NS(hf_config=NS(architectures=["MiMoV2FlashForCausalLM"]),
               has_attention_sinks=sinks, has_asymmetric_kv=False)
    compare.same(AREA, get_default_attn_backend(server_args(), False, model),
                 default_attention_backend(sm, "0.5.23", attention_sinks=sinks),
                 f"sm_{sm}, attention sinks {sinks}")


@pytest.mark.parametrize("sm", (*CARDS, 0))
def test_gpt_oss_has_its_own_rule(sm: int, card) -> None:
    from sglang.srt.arg_groups.model_overrides.gpt_oss import _gpt_oss_overrides

    card(sm)
    chosen = _gpt_oss_overrides(server_args(), NS(quantization_config=None))
    ours = gpt_oss_attention_backend(sm, "0.5.23", platform="rocm" if sm == 0 else "cuda")
    compare.same(AREA, chosen["attention_backend"], ours, f"gpt-oss on sm_{sm}")


FA4_CASES = [(sm, mla, topk, flag) for sm in (90, 100, 120) for mla in (False, True)
             for topk in (None, 1, 4) for flag in ("attention_backend", "prefill_attention_backend",
                                                     "decode_attention_backend")]


@pytest.mark.parametrize("case", FA4_CASES, ids=lambda c: "-".join(map(str, c)))
def test_fa4_page_size_conditions(case, card, monkeypatch: pytest.MonkeyPatch) -> None:
    from sglang.srt.arg_groups import overrides

    sm, mla, topk, flag = case
    card(sm)
    monkeypatch.setattr(overrides, "use_mla_backend", lambda view: mla)
    monkeypatch.setattr(overrides, "model_config_of",
                        lambda view: NS(hf_config=NS(architectures=["LlamaForCausalLM"])))
    monkeypatch.setattr(overrides.logger, "warning", lambda *a, **k: None)
    theirs = overrides._fa4_page_constraint(server_args(**{flag: "fa4"},
                                                        speculative_eagle_topk=topk))
    # forced_page_size_when's words: a non-MLA model on sm_100, topk unset or at most 1, any flag
    holds = not mla and sm // 10 == 10 and (topk or 0) <= 1
    assert "non-MLA" in forced_page_size_when("fa4") and "sm_100" in forced_page_size_when("fa4")
    compare.same(AREA, theirs, {"page_size": resolve_page_size("fa4", 16)} if holds else {},
                 f"fa4 page size, {case}")
