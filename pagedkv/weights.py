"""A model's weight size from its checkpoint, never from a per-architecture formula.

Three sources, in this order:

1. the checkpoint's own index: ``model.safetensors.index.json`` ``metadata.total_size``, the
   exact bytes of every stored tensor, quantized ones included, when the model's folder has
   one; for a quantized preset (whose ``config.json`` alone cannot give its bytes) the same
   number as the real index states it, shipped in ``presets/models/checkpoint_bytes.json``
   with where it was read (:func:`preset_checkpoint_bytes`; a preset without an entry falls
   through to 3);
2. for a quantized preset without a shipped index total (gpt-oss-120b's mxfp4, DeepSeek-V3's,
   V3.2's and Kimi-K2's fp8 blocks), the bytes SGLang 0.5.23 itself allocates: its own model
   class and quantization method built on the ``meta`` device, every parameter and
   persistent buffer, per tensor-parallel rank, shipped in
   ``presets/models/sglang_weight_bytes.json`` (:func:`preset_sglang_weight_bytes`; made and
   recounted by ``tests/reference/weights_sglang.py`` in the 0.5.23 reference venv, which
   tries every tp size up to 32 pagedkv accepts); the tp sizes at which SGLang cannot build
   the model are shipped as refused, with SGLang's message (:func:`preset_sglang_refused_tp`),
   and pagedkv refuses them too;
3. the parameter count of the model instantiated on torch's ``meta`` device with transformers
   (``with torch.device("meta"): Model(config)``: shapes only, no memory), exact for every
   architecture transformers knows, times the bytes of the served dtype; the presets'
   counts, made the same way, are shipped in ``presets/models/param_counts.json`` so that
   sizing a preset does not import transformers (a test recounts them);
4. otherwise a :class:`~pagedkv.errors.ConfigError` asking for ``--weights-gib`` (a quantized
   model outside the presets without an index).

The index total is every tensor the checkpoint stores, which is not always what SGLang loads
for serving. DeepSeek-V3's (and V3.2's, Kimi-K2's: their ``num_nextn_predict_layers``) index
also counts the multi-token-prediction layer, ``model.layers.61.*``; SGLang 0.5.23's DeepSeek
loader (``srt/models/deepseek_common/deepseek_weight_loader.py`` ``do_load_weights``, case
``NextNDisabledConfig``) skips every ``model.layers.N`` with N >= ``num_hidden_layers`` unless
it is loading the draft model of speculative decoding. pagedkv does not subtract it (the index
does not say which bytes are that layer's): for such a checkpoint the weights are an
over-count of SGLang's by that layer, and the KV pool an under-count by the same bytes.
Source 2 has no such over-count: SGLang builds no multi-token-prediction layer without
speculative decoding. gpt-oss's index counts exactly the tensors SGLang 0.5.23 loads (mxfp4
``*_blocks`` and ``*_scales`` of the experts, bf16 elsewhere): SGLang's model for gpt-oss-20b
on the meta device holds 13,761,264,768 B at tp=1, the index total to the byte.

The count is of what a checkpoint stores: parameters plus persistent buffers (DeepSeek's
router correction bias is a buffer in transformers and a tensor in the checkpoint), shared
(tied) tensors once, rotary tables (non-persistent buffers) not at all.

The same model on the meta device also gives a mixture of experts' routed share: the
tensors under each MoE layer's ``experts`` module (transformers' name in every MoE class it
has: Mixtral, Qwen2/3-MoE, Qwen3-Next, DeepSeek V2/V3, gpt-oss, Llama 4), shared experts
(``shared_expert(s)``) and routers not included. The simulator's step-time model reads it
(:func:`count_routed_expert_parameters`; the presets' counts are shipped in
``presets/models/routed_expert_counts.json``).
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from pathlib import Path
from typing import Any

from pagedkv.errors import ConfigError

INDEX_FILE = "model.safetensors.index.json"


def checkpoint_total_size(folder: Path) -> int | None:
    """``metadata.total_size`` of ``folder``'s safetensors index, or None without an index.

    Raises:
        ConfigError: an index that is not JSON or has no positive integer ``total_size``.
    """
    path = folder / INDEX_FILE
    if not path.is_file():
        return None
    try:
        size = json.loads(path.read_text()).get("metadata", {}).get("total_size")
    except (json.JSONDecodeError, AttributeError) as exc:
        raise ConfigError(f"{path} is not a safetensors index ({exc}); valid: the checkpoint's "
                          "own model.safetensors.index.json, or remove it") from None
    return _valid_total_size(size, f"{path}: metadata.total_size")


def _valid_total_size(size: object, where: str) -> int:
    """``size`` if it is a positive integer (an index's ``total_size``), else ConfigError."""
    if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
        raise ConfigError(f"{where}={size!r} is invalid; valid: the byte count of the "
                          "checkpoint's tensors (an integer >= 1)")
    return size


@functools.cache
def preset_checkpoint_bytes() -> dict[str, int]:
    """Preset name -> ``metadata.total_size`` (bytes) of its checkpoint's
    ``model.safetensors.index.json``, for the quantized presets whose index is quoted in public
    sources (``presets/models/checkpoint_bytes.json``; its ``source`` and ``how`` say where).

    Raises:
        ConfigError: an entry whose ``total_size`` is not a positive integer (a broken package).
    """
    text = resources.files("pagedkv.presets").joinpath("models/checkpoint_bytes.json").read_text()
    return checkpoint_sizes(json.loads(text))


def checkpoint_sizes(table: dict[str, Any]) -> dict[str, int]:
    """``{preset: {"total_size": N, ...}}`` (keys starting with ``_`` are notes) -> ``{preset: N}``.

    Raises:
        ConfigError: an entry whose ``total_size`` is not a positive integer.
    """
    sizes = {}
    for name, entry in table.items():
        if name.startswith("_"):
            continue
        size = entry.get("total_size") if isinstance(entry, dict) else None
        sizes[name] = _valid_total_size(size, f"checkpoint_bytes.json: {name}.total_size")
    return sizes


@functools.cache
def preset_sglang_weight_bytes() -> dict[str, dict[int, int]]:
    """Preset name -> ``{tp: bytes of weights one GPU holds}`` as SGLang 0.5.23 builds the
    model (``presets/models/sglang_weight_bytes.json``: its own model class and quantization
    method on the meta device, rank 0 of the tp group; see ``_about`` there).

    Raises:
        ConfigError: an entry whose sizes are not positive integers keyed by tp (a broken
            package).
    """
    path = "models/sglang_weight_bytes.json"
    return sglang_rank_sizes(json.loads(resources.files("pagedkv.presets").joinpath(path)
                                        .read_text()))


def sglang_rank_sizes(table: dict[str, Any]) -> dict[str, dict[int, int]]:
    """``{preset: {"per_rank": {"tp": N, ...}, ...}}`` (keys starting with ``_`` are notes) ->
    ``{preset: {tp: N}}``; tp 1 is required (the whole model, for other tp sizes).

    Raises:
        ConfigError: an entry without ``per_rank``, a tp that is not an integer >= 1, no tp 1,
            or a size that is not a positive integer.
    """
    sizes: dict[str, dict[int, int]] = {}
    for name, entry in table.items():
        if name.startswith("_"):
            continue
        ranks = entry.get("per_rank") if isinstance(entry, dict) else None
        if not isinstance(ranks, dict) or "1" not in ranks:
            raise ConfigError(f"sglang_weight_bytes.json: {name}.per_rank={ranks!r} is invalid; "
                              'valid: {"1": bytes at tp=1, "<tp>": bytes per rank, ...}')
        sizes[name] = {}
        for tp, size in ranks.items():
            sizes[name][_tp_key(tp, f"{name}.per_rank")] = _valid_total_size(
                size, f"sglang_weight_bytes.json: {name}.per_rank[{tp}]")
    return sizes


@functools.cache
def preset_sglang_refused_tp() -> dict[str, dict[int, str]]:
    """Preset name -> ``{tp: SGLang's message}`` for the tensor-parallel sizes at which SGLang
    0.5.23 cannot build the quantized preset (``refused`` in
    ``presets/models/sglang_weight_bytes.json``: its own model class raised while being built,
    e.g. DeepSeek-V3's fp8 dense MLP at tp 32, 576 rows per rank, not a multiple of the
    128-row block). Every tp size up to 32 that pagedkv accepts was tried (``tp_tried``).

    Raises:
        ConfigError: a ``refused`` entry that is not ``{"<tp>": message}`` (a broken package).
    """
    path = "models/sglang_weight_bytes.json"
    return sglang_refusals(json.loads(resources.files("pagedkv.presets").joinpath(path)
                                      .read_text()))


def sglang_refusals(table: dict[str, Any]) -> dict[str, dict[int, str]]:
    """``{preset: {"refused": {"tp": message, ...}, ...}}`` (keys starting with ``_`` are
    notes; an entry without ``refused`` refuses nothing) -> ``{preset: {tp: message}}``.

    Raises:
        ConfigError: ``refused`` not a dict, a tp that is not an integer >= 1, or an empty
            message.
    """
    out: dict[str, dict[int, str]] = {}
    for name, entry in table.items():
        if name.startswith("_"):
            continue
        refused = entry.get("refused", {}) if isinstance(entry, dict) else None
        if not isinstance(refused, dict):
            raise ConfigError(f"sglang_weight_bytes.json: {name}.refused={refused!r} is invalid;"
                              ' valid: {"<tp>": SGLang\'s message, ...}')
        out[name] = {}
        for tp, message in refused.items():
            if not isinstance(message, str) or not message:
                raise ConfigError(f"sglang_weight_bytes.json: {name}.refused[{tp}]={message!r}"
                                  " is invalid; valid: SGLang's message, a non-empty string")
            out[name][_tp_key(tp, f"{name}.refused")] = message
    return out


def _tp_key(tp: object, where: str) -> int:
    """``int(tp)`` for a key of ``sglang_weight_bytes.json`` that is a tensor-parallel size
    (``"1"``, ``"2"``, ...), else ConfigError naming ``where``."""
    if not (isinstance(tp, str) and tp.isdigit() and int(tp) >= 1):
        raise ConfigError(f"sglang_weight_bytes.json: {where} key {tp!r} is invalid; valid: a "
                          "tensor-parallel size, an integer >= 1")
    return int(tp)


@functools.cache
def preset_param_counts() -> dict[str, int]:
    """Preset name -> parameter count, as :func:`count_parameters` gives it."""
    text = resources.files("pagedkv.presets").joinpath("models/param_counts.json").read_text()
    return {k: int(v) for k, v in json.loads(text).items() if not k.startswith("_")}


@functools.cache
def preset_routed_expert_counts() -> dict[str, int]:
    """Preset name -> routed-expert tensor elements, as :func:`count_routed_expert_parameters`
    gives them (0 for a dense preset)."""
    path = "models/routed_expert_counts.json"
    text = resources.files("pagedkv.presets").joinpath(path).read_text()
    return {k: int(v) for k, v in json.loads(text).items() if not k.startswith("_")}


def count_parameters(config: dict[str, Any]) -> int:
    """Tensor elements a checkpoint of ``config`` stores: the model built on the meta device.

    The class is ``transformers.<architectures[0]>`` with its own config class (as SGLang
    loads it by architecture), else ``AutoModelForCausalLM`` for the ``model_type``.

    Raises:
        ConfigError: transformers is missing or does not know the model; pass its size.
    """
    return _count(json.dumps(config, sort_keys=True))[0]


def count_routed_expert_parameters(config: dict[str, Any]) -> int:
    """Tensor elements of the routed experts of every MoE layer (0 for a dense model): those
    under modules named ``experts`` in the model :func:`count_parameters` builds (a shared
    expert, the router and everything else are not routed).

    Raises:
        ConfigError: transformers is missing or does not know the model.
    """
    return _count(json.dumps(config, sort_keys=True))[1]


@functools.lru_cache(maxsize=64)
def _count(config_json: str) -> tuple[int, int]:
    config = json.loads(config_json)
    refusal = ("its weight size needs a checkpoint folder with model.safetensors.index.json "
               "or the real size per GPU: pass --weights-gib (weights_bytes=)")
    try:
        import torch
        import transformers
    except ImportError:
        raise ConfigError(f"counting parameters needs transformers and torch; {refusal}") from None
    archs = config.get("architectures") or []
    cls = getattr(transformers, archs[0], None) if archs else None
    try:
        fields = {k: v for k, v in config.items() if k not in ("architectures", "model_type")}
        if cls is not None and getattr(cls, "config_class", None) is not None:
            hf_config = cls.config_class(**fields)
        else:
            hf_config = transformers.AutoConfig.for_model(config.get("model_type"), **fields)
            cls = transformers.AutoModelForCausalLM
        with torch.device("meta"):
            model = (cls.from_config(hf_config) if cls is transformers.AutoModelForCausalLM
                     else cls(hf_config))
    except Exception as exc:  # any failure means transformers cannot build it
        raise ConfigError(
            f"model_type={config.get('model_type')!r} (architectures={archs!r}) is not a model "
            f"this transformers ({transformers.__version__}) can build ({type(exc).__name__}: "
            f"{str(exc)[:120]}); {refusal}") from None
    seen: set[int] = set()
    total = routed = 0
    for path, module in model.named_modules():
        tensors = list(module.named_parameters(recurse=False))
        tensors += [(n, b) for n, b in module.named_buffers(recurse=False)
                    if n not in module._non_persistent_buffers_set]
        in_experts = "experts" in path.split(".")  # shared_expert(s) are another name
        for _, tensor in tensors:
            if tensor is not None and id(tensor) not in seen:
                seen.add(id(tensor))
                total += tensor.numel()
                routed += tensor.numel() if in_experts else 0
    return total, routed


def quant_method(config: dict[str, Any]) -> str:
    """``quantization_config.quant_method`` ("unknown" when the config does not say)."""
    quant = config.get("quantization_config")
    if quant is None:
        return ""
    method = quant.get("quant_method") if isinstance(quant, dict) else None
    return str(method or "unknown")
