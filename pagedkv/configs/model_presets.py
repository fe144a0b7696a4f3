"""The models pagedkv ships (configs only, no weights) and :func:`load_model`, which reads a
preset, a ``config.json`` or a model folder into a :class:`~pagedkv.configs.model_config.ModelSpec`.

SGLang reads the same ``config.json`` (``srt/configs/model_config.py`` ``ModelConfig``, through
transformers' ``AutoConfig``); the presets are the published configs, their sources listed in
``pagedkv/presets/models/README.md``.
"""

from __future__ import annotations

import json
from dataclasses import replace
from importlib import resources
from pathlib import Path

from pagedkv.configs.model_config import ModelSpec
from pagedkv.errors import ConfigError, bad_value
from pagedkv.weights import (
    checkpoint_total_size,
    preset_checkpoint_bytes,
    preset_sglang_refused_tp,
    preset_sglang_weight_bytes,
)

#: Preset name -> the Hugging Face repository whose ``config.json`` is shipped verbatim.
MODEL_PRESETS: dict[str, str] = {
    "llama-3-8b": "meta-llama/Meta-Llama-3-8B",
    "llama-3.1-8b": "meta-llama/Llama-3.1-8B",
    "llama-3.1-70b": "meta-llama/Llama-3.1-70B",
    "qwen2.5-7b": "Qwen/Qwen2.5-7B",
    "qwen3-4b": "Qwen/Qwen3-4B",
    "qwq-32b": "Qwen/QwQ-32B",
    "mistral-7b-v0.3": "mistralai/Mistral-7B-v0.3",
    "gemma-2-9b": "google/gemma-2-9b",
    "deepseek-v3": "deepseek-ai/DeepSeek-V3",
    "deepseek-v3.2": "deepseek-ai/DeepSeek-V3.2",
    "mixtral-8x7b": "mistralai/Mixtral-8x7B-v0.1",
    "qwen3-30b-a3b": "Qwen/Qwen3-30B-A3B",
    "qwen3-235b-a22b": "Qwen/Qwen3-235B-A22B",
    "gpt-oss-20b": "openai/gpt-oss-20b",
    "gpt-oss-120b": "openai/gpt-oss-120b",
    "qwen3-next-80b-a3b": "Qwen/Qwen3-Next-80B-A3B-Instruct",
    "kimi-k2": "moonshotai/Kimi-K2-Instruct",
    "gemma-3-27b": "google/gemma-3-27b-it",
    "llama-4-scout": "meta-llama/Llama-4-Scout-17B-16E-Instruct",
}



def load_model(name_or_path: str | Path, disable_hybrid_swa_memory: bool = False) -> ModelSpec:
    """A ModelSpec from a preset name (see :data:`MODEL_PRESETS`) or a ``config.json`` path.

    ``name_or_path`` may name a preset, a ``config.json`` file, or a folder holding one;
    ``disable_hybrid_swa_memory``: see :meth:`ModelSpec.from_config`.

    Raises:
        ConfigError: unknown preset, missing file, invalid JSON or missing fields.
    """
    key = str(name_or_path)
    if key.lower() in MODEL_PRESETS:
        text = resources.files("pagedkv.presets").joinpath(f"models/{key.lower()}.json").read_text()
        # a quantized preset's weights: its checkpoint's index total, as a folder's index gives
        # it, else the bytes SGLang's own model class holds per GPU (pagedkv.weights)
        spec = ModelSpec.from_config(json.loads(text), name=key.lower(),
                                     checkpoint_bytes=preset_checkpoint_bytes().get(key.lower()),
                                     disable_hybrid_swa_memory=disable_hybrid_swa_memory)
        per_rank = preset_sglang_weight_bytes().get(key.lower(), {})
        refused = preset_sglang_refused_tp().get(key.lower(), {})
        return replace(spec, sglang_rank_bytes=tuple(sorted(per_rank.items())),
                       sglang_refused_tp=tuple(sorted(refused.items())))
    path = Path(key)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise bad_value("model", key, "a folder holding a config.json (this one has none)")
        path = path / "config.json"
    checkpoint = checkpoint_total_size(path.parent) if path.is_file() else None
    if not path.is_file():
        raise bad_value("model", key, f"a preset ({', '.join(MODEL_PRESETS)}) or the path of an "
                        "existing config.json file or folder")
    try:
        config = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ConfigError(f"model={key!r}: {path} is not valid JSON ({exc})") from None
    if not isinstance(config, dict):
        raise ConfigError(f"model={key!r}: {path} holds a JSON {type(config).__name__}, not an "
                          "object; valid: a Hugging Face config.json")
    return ModelSpec.from_config(config, name=key, checkpoint_bytes=checkpoint,
                                 disable_hybrid_swa_memory=disable_hybrid_swa_memory)
