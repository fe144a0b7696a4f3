"""The bytes of weights SGLang 0.5.23 allocates for a model, from its own model class built on
torch's ``meta`` device on this CPU (shapes and dtypes, no memory).

What runs is SGLang's: ``ModelConfig`` parses the config (written to a temporary folder, as
:mod:`sgl_model_config` does), a real ``ServerArgs`` is published through the runtime context,
``model_loader/loader.py`` ``_get_quantization_config`` builds the checkpoint's quantization
config (``Fp8Config`` with 128x128 blocks for DeepSeek-V3/V3.2 and Kimi-K2, ``Mxfp4Config``
for gpt-oss) and ``_initialize_model`` builds the architecture's class
(``DeepseekV3ForCausalLM``, ``DeepseekV32ForCausalLM``, ``GptOssForCausalLM``) as
``DefaultModelLoader.initialize_model_for_startup`` does, under the model's dtype, on ``meta``.
The bytes are every parameter and persistent buffer of that model, ``numel * element_size``,
shared tensors once; non-persistent buffers (rotary ``cos_sin_cache``) are not weights and are
left out. Without speculative decoding SGLang builds no multi-token-prediction layer: the
model has ``num_hidden_layers`` layers, DeepSeek's layer 61 is not among them.

Faked, as nothing on a CPU can answer them:

- the parallel groups: each rank's place (``derive_spawn_ranks``, ``_attention_ranks``) and
  groups of the configured widths are published with ``get_parallel().override``, so the
  model is built as rank ``rank`` of a ``tp``-wide tensor-parallel group (no collective runs
  while a model is built);
- the GPU: the server arguments SGLang's own start-up resolves on sm_90 (H100/H200) for
  gpt-oss's mxfp4 checkpoint are published explicitly (``arg_groups/model_overrides/
  gpt_oss.py`` ``_gpt_oss_overrides``: ``dtype`` bfloat16, ``moe_runner_backend``
  triton_kernel, ``attention_backend`` fa3), ``mxfp4`` is registered as a quantization
  method as it is on CUDA (``layers/quantization/__init__.py``), and ``has_triton_kernels``
  is set as on a GPU install (``Mxfp4MoEMethod.create_weights`` then pads each rank's expert
  intermediate size to a multiple of 64); ``vllm`` (imported by the rotary embedding off
  CUDA, never called) is an inert stand-in.

Every tensor-parallel size up to 32 that pagedkv accepts for a preset is tried; where SGLang's
own construction raises (``ValueError``: DeepSeek-V3, V3.2 and Kimi-K2's fp8 dense MLP at tp 32,
18432 / 32 = 576 rows per rank, not a multiple of the 128-row block ``Fp8LinearMethod``
requires) the tp size is shipped as refused, with SGLang's message.

The bytes are those the model holds once it is built, before ``process_weights_after_loading``
(which on a GPU may re-lay out scales, e.g. DeepGEMM's on Blackwell): fp8 block weights and
their scales keep the checkpoint's shapes at construction.

Run as a script to write ``pagedkv/presets/models/sglang_weight_bytes.json``:
``PAGEDKV_SGLANG_RELEASE=0.5.23 .venv-sglang-0.5.23/bin/python tests/reference/weights_sglang.py``.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script
sys.path.insert(1, str(Path(__file__).resolve().parents[2]))  # and pagedkv

import sgl_boot

sgl_boot.load()

import torch  # noqa: E402
from sglang.srt import runtime_context as rc  # noqa: E402
from sglang.srt.configs.load_config import LoadConfig  # noqa: E402
from sglang.srt.configs.model_config import ModelConfig  # noqa: E402
from sglang.srt.layers import quantization as quant_mod  # noqa: E402
from sglang.srt.layers.quantization import mxfp4 as mxfp4_mod  # noqa: E402
from sglang.srt.model_loader import loader  # noqa: E402


@contextmanager
def _as_on_a_gpu() -> Iterator[None]:
    """While a model is built: ``mxfp4`` registered as on CUDA, ``has_triton_kernels`` as on a
    GPU install, and an inert ``vllm`` for the rotary embedding's import off CUDA; everything
    put back on leaving, so that other reference tests in the process see SGLang unchanged."""
    registries = (quant_mod.BASE_QUANTIZATION_METHODS, quant_mod.QUANTIZATION_METHODS)
    saved = [r.get("mxfp4") for r in registries]
    triton_kernels = mxfp4_mod.has_triton_kernels
    stand_ins = [n for n in ("vllm", "vllm._custom_ops") if n not in sys.modules]
    for registry in registries:
        registry["mxfp4"] = mxfp4_mod.Mxfp4Config
    mxfp4_mod.has_triton_kernels = True
    for name in stand_ins:
        sys.modules[name] = module = sgl_boot._InertModule(name)
        module.__path__ = []
    try:
        yield
    finally:
        for registry, value in zip(registries, saved, strict=True):
            if value is None:
                registry.pop("mxfp4", None)
            else:
                registry["mxfp4"] = value
        mxfp4_mod.has_triton_kernels = triton_kernels
        for name in stand_ins:
            sys.modules.pop(name, None)


PRESETS = Path(__file__).resolve().parents[2] / "pagedkv" / "presets" / "models"
#: The presets whose weights are sized this way: the quantized ones (gpt-oss-20b: the check
#: against its checkpoint's index total).
QUANTIZED_PRESETS = ("gpt-oss-20b", "gpt-oss-120b", "deepseek-v3", "deepseek-v3.2", "kimi-k2")
#: Every tensor-parallel size up to this one that pagedkv accepts for a preset is tried.
MAX_TP = 32


def tp_sizes(name: str) -> list[int]:
    """The tp sizes in 1..:data:`MAX_TP` that pagedkv accepts for preset ``name`` (its KV cell
    can be sized: tp divides the query heads, and divides or is a multiple of the KV heads)."""
    from pagedkv.configs.model_presets import load_model
    from pagedkv.errors import ConfigError

    spec = load_model(name)
    sizes = []
    for tp in range(1, MAX_TP + 1):
        try:
            spec.cell_size(tp=tp)
        except ConfigError:
            continue
        sizes.append(tp)
    return sizes


def _server_args(config: dict[str, Any]) -> dict[str, Any]:
    """What SGLang's start-up resolves on sm_90 for this checkpoint (see the module doc)."""
    quant = (config.get("quantization_config") or {}).get("quant_method")
    if config.get("architectures") == ["GptOssForCausalLM"] and quant == "mxfp4":
        return {"dtype": "bfloat16", "moe_runner_backend": "triton_kernel",
                "attention_backend": "fa3"}
    return {}


class _Group:
    """A process group of ``world_size`` ranks seen from ``rank``: what model construction
    reads of one (no collective runs)."""

    def __init__(self, world_size: int, rank: int) -> None:
        self.world_size, self.rank_in_group = world_size, rank
        self.rank = self.local_rank = rank
        self.ranks = list(range(world_size))
        self.first_rank, self.last_rank = 0, world_size - 1
        self.is_first_rank, self.is_last_rank = rank == 0, rank == world_size - 1
        self.device_group = self.cpu_group = None


def build_model(config: dict[str, Any], tp: int = 1, rank: int = 0) -> torch.nn.Module:
    """SGLang 0.5.23's model for ``config`` on the meta device, as rank ``rank`` of ``tp``."""
    with _as_on_a_gpu():
        return _build(config, tp, rank)


def _build(config: dict[str, Any], tp: int, rank: int) -> torch.nn.Module:
    args = _server_args(config)
    folder = Path(tempfile.mkdtemp(prefix="pagedkv-weights-"))
    (folder / "config.json").write_text(json.dumps(config))
    mc = ModelConfig(str(folder), trust_remote_code=False, dtype=args.get("dtype", "auto"))
    override = rc.get_context().override_server_args(tp_size=tp, device="cpu", **args)
    override.install()
    try:
        par = rc.get_parallel()
        place = rc.derive_spawn_ranks(
            world_rank=rank, tp_size=par.tp_size, ep_join_rank_offset=par.ep_join_rank_offset,
            attn_cp_size=par.attn_cp_size, attn_tp_size=par.attn_tp_size,
            moe_dp_size=par.moe_dp_size, moe_ep_size=par.moe_ep_size)
        place.update(rc._attention_ranks(par, place["tp_rank"]))
        place.update(attn_dcp_rank=0, dcp_rank=0)
        widths = {"tp": par.tp_size, "pp": 1, "moe_ep": par.moe_ep_size,
                  "moe_dp": par.moe_dp_size, "moe_tp": par.moe_tp_size,
                  "attn_tp": par.attn_tp_size, "attn_cp": par.attn_cp_size, "dcp": 1,
                  "shared_experts_tp": par.tp_size}  # shared experts: the tp group's ranks
        ranks = {**place, "shared_experts_tp_rank": place["tp_rank"]}
        groups = {f"{g}_group": _Group(w, ranks.get(f"{g}_rank", 0)) for g, w in widths.items()}
        with par.override(world_group=_Group(tp, rank), **groups, **place):
            quant_config = loader._get_quantization_config(mc, LoadConfig())
            with loader.set_default_torch_dtype(mc.dtype), torch.device("meta"):
                return loader._initialize_model(mc, LoadConfig(), quant_config)
    finally:
        override.restore()


def weight_bytes(model: torch.nn.Module) -> dict[str, int]:
    """``{"total": bytes, dtype name: bytes, ...}`` over every parameter and persistent buffer
    of ``model`` (shared tensors once)."""
    seen: set[int] = set()
    out: dict[str, int] = {"total": 0}
    for module in model.modules():
        tensors = list(module.parameters(recurse=False))
        tensors += [b for n, b in module.named_buffers(recurse=False)
                    if n not in module._non_persistent_buffers_set]
        for tensor in tensors:
            if tensor is None or id(tensor) in seen:
                continue
            seen.add(id(tensor))
            size = tensor.numel() * tensor.element_size()
            out["total"] += size
            key = str(tensor.dtype).removeprefix("torch.")
            out[key] = out.get(key, 0) + size
    return out


def preset_config(name: str) -> dict[str, Any]:
    """The shipped ``config.json`` of preset ``name``."""
    return json.loads((PRESETS / f"{name}.json").read_text())


def rank_bytes(name: str, tp: int) -> int:
    """Bytes of weights rank 0 of ``tp`` holds for preset ``name``; every rank's are checked
    equal to it at the first and last rank (AssertionError otherwise)."""
    config = preset_config(name)
    first = weight_bytes(build_model(config, tp, 0))["total"]
    last = weight_bytes(build_model(config, tp, tp - 1))["total"] if tp > 1 else first
    assert first == last, (name, tp, first, last)
    return first


def table() -> dict[str, Any]:
    """The contents of ``sglang_weight_bytes.json``."""
    out: dict[str, Any] = {"_about": (
        "Preset -> bytes of weights one GPU holds under SGLang 0.5.23, per tensor-parallel "
        "size: SGLang's own model class and quantization method (Fp8Config 128x128 blocks, "
        "Mxfp4Config) built on torch's meta device as rank 0 of the tp group (the last rank "
        "checked equal), every parameter and persistent buffer, numel x element_size; no "
        "multi-token-prediction layer (SGLang builds none without speculative decoding). "
        f"Every tp size up to {MAX_TP} that pagedkv accepts for the preset is tried "
        "(tp_tried); refused: the tp sizes at which SGLang's own construction raises, with "
        "its message (pagedkv refuses them too). "
        "Made by tests/reference/weights_sglang.py in the 0.5.23 reference venv (its "
        "docstring says what is faked: the parallel groups, and the sm_90 server arguments "
        "for gpt-oss); tests/reference/test_sglang_weight_bytes.py recomputes it. "
        "tp_1_dtypes: the tp=1 bytes by dtype. Read by pagedkv.weights.preset_sglang_weight_bytes "
        "and preset_sglang_refused_tp.")}
    for name in QUANTIZED_PRESETS:
        dtypes = weight_bytes(build_model(preset_config(name), 1, 0))
        per_rank: dict[str, int] = {}
        refused: dict[str, str] = {}
        tried = tp_sizes(name)
        for tp in tried:
            try:
                per_rank[str(tp)] = rank_bytes(name, tp)
            except ValueError as exc:  # what SGLang's layers raise for a shape they cannot split
                refused[str(tp)] = str(exc)
        out[name] = {"per_rank": per_rank, "refused": refused, "tp_tried": tried,
                     "tp_1_dtypes": {k: v for k, v in sorted(dtypes.items()) if k != "total"}}
    return out


SHIPPED = PRESETS / "sglang_weight_bytes.json"

if __name__ == "__main__":
    path = SHIPPED
    path.write_text(json.dumps(table(), indent=2) + "\n")
    print(path.read_text())
