"""Where a real model comes from: device and dtype checks, loading, and free-memory readings.

Follows SGLang's ``python/sglang/srt/model_executor/model_runner.py`` (``load_model``: "Load
weight begin/end. avail mem=...", read before and after the weights arrive) and
``model_loader/`` (which builds the model from a checkpoint). pagedkv loads through Hugging
Face ``transformers``: a hub id or a local folder (``from_pretrained``), a config (random
weights, for tests and machines without the network), or a model already built.

Device and dtype rules, checked before anything is loaded:

- ``cuda``: float16 everywhere; bfloat16 from compute capability 8.0 (A100, L4, H100) on (a
  T4, sm_75, has no bf16 arithmetic); float32 as a slow teaching case. Default: bf16 where
  the card has it, else fp16 (SGLang's ``--dtype auto`` downgrades bf16 the same way on old
  cards).
- ``cpu``: float32 only. The CPU path exists to check pagedkv against Hugging Face token for
  token: torch's 16-bit CPU matmuls are slow and round differently, and Triton's interpreter
  emulates 16-bit dots (chapter 6).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from pagedkv.errors import bad_value
from pagedkv.model_executor.hub import checkpoint_kwargs

#: ``(free bytes, total bytes)`` of a device, the shape of ``torch.cuda.mem_get_info()``.
MemGetInfo = Callable[[], tuple[int, int]]

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32, "fp32": torch.float32,
    "float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
}
_KV_NAMES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


def resolve_device(device: str | torch.device | None) -> torch.device:
    """``device`` as a torch device; None picks ``cuda`` when there is one, else ``cpu``.

    Raises:
        ConfigError: not ``cpu`` or ``cuda[:n]``, or ``cuda`` on a machine without one.
    """
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise bad_value("device", device, "'cpu', 'cuda' or 'cuda:<n>'") from None
    if dev.type not in ("cpu", "cuda"):
        raise bad_value("device", device, "'cpu', 'cuda' or 'cuda:<n>'")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise bad_value("device", device, "'cpu' (this machine has no CUDA device)")
    return dev


def supported_dtypes(device: torch.device, capability: tuple[int, int] | None = None
                     ) -> tuple[torch.dtype, ...]:
    """The dtypes the runner accepts on ``device`` (see the module docstring).

    ``capability``: the card's compute capability, default read from the device (a test
    may pass ``(7, 5)`` to see what a T4 allows).
    """
    if device.type == "cpu":
        return (torch.float32,)
    major, minor = capability or torch.cuda.get_device_capability(device)
    wide = (torch.bfloat16,) if (major, minor) >= (8, 0) else ()
    return (*wide, torch.float16, torch.float32)


def resolve_dtype(dtype: str | torch.dtype | None, device: torch.device,
                  capability: tuple[int, int] | None = None) -> torch.dtype:
    """``dtype`` (a name of :data:`DTYPES` or a torch dtype) checked against ``device``;
    None picks the first supported one (bf16, else fp16, on a GPU; fp32 on the CPU).

    Raises:
        ConfigError: an unknown name, or a dtype the device cannot run (bf16 on a T4, any
            16-bit type on the CPU), naming what it can.
    """
    allowed = supported_dtypes(device, capability)
    if dtype is None:
        return allowed[0]
    resolved = DTYPES.get(dtype) if isinstance(dtype, str) else dtype
    if resolved is None:
        raise bad_value("dtype", dtype, ", ".join(DTYPES))
    if resolved not in allowed:
        where = "the CPU" if device.type == "cpu" else f"{device} (compute capability " \
            f"{'.'.join(map(str, capability or torch.cuda.get_device_capability(device)))})"
        names = ", ".join(str(d).removeprefix("torch.") for d in allowed)
        raise bad_value("dtype", str(resolved).removeprefix("torch."), f"{names} on {where}")
    return resolved


def kv_dtype_name(dtype: torch.dtype) -> str:
    """The sizing name of a pool dtype (``"bf16"``, ``"fp16"``, ``"fp32"``)."""
    return _KV_NAMES[dtype]


def free_memory(device: torch.device, mem_get_info: MemGetInfo | None = None
                ) -> tuple[int, int] | None:
    """``(free, total)`` bytes of ``device`` now, or None where nothing is measured (the CPU).

    SGLang's ``get_available_gpu_memory`` empties torch's cache first so that freed blocks
    count as free; so do we. ``mem_get_info`` replaces the reading (tests drive the GPU
    sizing path on the CPU with it).
    """
    if mem_get_info is not None:
        free, total = mem_get_info()
        return int(free), int(total)
    if device.type != "cuda":
        return None
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    free, total = torch.cuda.mem_get_info(device)
    return int(free), int(total)


def random_model_config(arch: str = "llama", size: str = "tiny", **overrides: Any) -> Any:
    """A ``transformers`` config for a random-weight model (no download).

    Args:
        arch: ``llama``, ``mistral``, ``qwen2`` or ``qwen3``.
        size: ``tiny`` (2 layers, hidden 64, 4 query heads sharing 2 KV heads of 16, vocab
            128, context 512: what the CPU tests and the book's CPU cells run) or
            ``qwen2.5-0.5b`` (Qwen2.5-0.5B's shapes: 24 layers, hidden 896, 14 query and 2 KV
            heads of 64, vocab 151,936, about 494 M parameters).
        overrides: any config field.

    Raises:
        ConfigError: an unknown ``arch`` or ``size``.
    """
    import transformers  # after pagedkv.layers.attention set TRITON_INTERPRET (see there)

    classes = {"llama": "LlamaConfig", "mistral": "MistralConfig", "qwen2": "Qwen2Config",
               "qwen3": "Qwen3Config"}
    if arch not in classes:
        raise bad_value("arch", arch, ", ".join(classes))
    shapes: dict[str, dict[str, Any]] = {
        "tiny": dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                     max_position_embeddings=512, initializer_range=0.2),
        "qwen2.5-0.5b": dict(vocab_size=151_936, hidden_size=896, intermediate_size=4864,
                             num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                             head_dim=64, max_position_embeddings=32_768, rope_theta=1e6,
                             rms_norm_eps=1e-6, tie_word_embeddings=True),
    }
    if size not in shapes:
        raise bad_value("size", size, ", ".join(shapes))
    fields = {**shapes[size], "bos_token_id": None, "eos_token_id": None, "pad_token_id": None}
    if arch == "mistral":
        fields["sliding_window"] = None
    return getattr(transformers, classes[arch])(**{**fields, **overrides})


def load_causal_lm(source: str | nn.Module | Any, device: torch.device, dtype: torch.dtype,
                   seed: int = 0) -> tuple[nn.Module, str]:
    """Build or load a causal LM on ``device`` in ``dtype``, in eval mode.

    Args:
        source: a hub id or local folder (``AutoModelForCausalLM.from_pretrained``), a
            ``transformers`` config (random weights, seeded by ``seed``), or a model.
        device, dtype: where and how the weights live.

    Returns:
        ``(model, name)``: ``name`` is the hub id, the folder, ``random <model_type>`` or the
        model's class name.

    Raises:
        ConfigError: a ``source`` that is none of these; a folder that does not exist or has
            no ``config.json``; a hub id the hub does not serve, or that is not cached while
            the hub cannot be reached (:func:`~pagedkv.model_executor.hub.checkpoint_kwargs`,
            decided at once, before ``transformers`` would retry the network).
    """
    import transformers  # after pagedkv.layers.attention set TRITON_INTERPRET (see there)

    if isinstance(source, nn.Module):
        return source.to(device=device, dtype=dtype).eval(), type(source).__name__
    # transformers >= 4.56 calls the argument ``dtype``, earlier releases ``torch_dtype``.
    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    kwarg = {"dtype" if (major, minor) >= (4, 56) else "torch_dtype": dtype}
    if isinstance(source, transformers.PretrainedConfig):
        torch.manual_seed(seed)
        with torch.device(device):
            model = transformers.AutoModelForCausalLM.from_config(source, **kwarg)
        return model.to(device=device, dtype=dtype).eval(), f"random {source.model_type}"
    if isinstance(source, str):
        local = checkpoint_kwargs(source)
        try:
            model = transformers.AutoModelForCausalLM.from_pretrained(source, **kwarg, **local)
        except OSError as exc:  # a hub id the hub does not know, a folder without weights
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise bad_value("model", source, f"a checkpoint transformers can load ({first})"
                            ) from None
        return model.to(device=device, dtype=dtype).eval(), source
    raise bad_value("model", type(source).__name__,
                    "a hub id or folder, a transformers config, or a model")
