"""pagedkv: how an LLM server (SGLang is the reference) manages KV-cache memory on a GPU.

Layers, bottom-up (nothing below imports from above), named after SGLang's ``srt/`` tree:

- ``pagedkv.configs``, ``pagedkv.gpus``, ``pagedkv.sizing``: bytes per token, pool size,
  SGLang's ``mem_fraction_static`` and ``max_total_num_tokens``.
- ``pagedkv.workloads``: seeded request streams (lengths, or token ids for prefix sharing).
- ``pagedkv.mem_cache``: ``ReqToTokenPool`` and ``MHATokenToKVPool`` (``memory_pool``),
  ``TokenToKVPoolAllocator`` and ``PagedTokenToKVPoolAllocator`` (``allocator``),
  ``RadixCache`` (``radix_cache``), the max-length baseline (``contiguous``).
- ``pagedkv.layers.attention``: a Triton paged decode-attention kernel and its reference.
- ``pagedkv.model_executor``: what runs a batch (the roofline step-time model, a Hugging
  Face model on the paged pool).
- ``pagedkv.managers``: the scheduler (``PrefillAdder``, ``new_token_ratio``,
  ``retract_decode``) and the trace it writes.
- ``pagedkv.metrics``: a finished run's numbers (``Metrics``, per-request latencies).
- ``pagedkv.entrypoints``: the front door: ``Engine``, ``simulate``, sweeps and the
  ``pagedkv`` command.
- ``pagedkv.lessons``: the book's seeded examples and analyses; the engine never imports it.

The sizing layer is re-exported here (it imports no torch); ``pagedkv.Engine`` (one scheduler
over a real model or the simulator, :mod:`pagedkv.entrypoints.engine`) loads on first use;
import the others from their modules::

    from pagedkv import get_gpu, load_model, plan_pool
    plan = plan_pool(load_model("llama-3-8b"), gpu=get_gpu("h100-sxm-80gb"))

    import pagedkv
    engine = pagedkv.Engine.from_pretrained("Qwen/Qwen2.5-0.5B-Instruct", page_size=16)
    print(engine.generate(["What is a KV cache?"], 64).texts)

    from pagedkv.workloads.request_files import load_requests
    res = pagedkv.simulate(load_requests("requests.csv"), model="llama-3-8b", gpu="l4")
"""

from typing import Any

from pagedkv.configs.model_config import ModelSpec
from pagedkv.configs.model_presets import MODEL_PRESETS, load_model
from pagedkv.errors import (
    AllocatorError,
    ConfigError,
    NotEnoughMemoryError,
    OutOfMemoryError,
    PagedKVError,
)
from pagedkv.gpus import GPU_PRESETS, GPUSpec, get_gpu
from pagedkv.sizing import KVPoolPlan, batch_cap, default_mem_fraction_static, plan_pool

__version__ = "0.1.0"

__all__ = [
    "GPU_PRESETS",
    "MODEL_PRESETS",
    "AllocatorError",
    "ConfigError",
    "Engine",
    "GPUSpec",
    "KVPoolPlan",
    "ModelSpec",
    "NotEnoughMemoryError",
    "OutOfMemoryError",
    "PagedKVError",
    "__version__",
    "batch_cap",
    "default_mem_fraction_static",
    "get_gpu",
    "load_model",
    "plan_pool",
    "simulate",
    "simulated_engine",
]


def __getattr__(name: str) -> Any:
    """Load ``Engine``, ``simulate`` and ``simulated_engine`` on first access (PEP 562):
    they import torch and triton, which ``pagedkv size`` must not wait for."""
    if name in ("Engine", "simulate", "simulated_engine"):
        import pagedkv.entrypoints as entrypoints

        value = getattr(entrypoints, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
