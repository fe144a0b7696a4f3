"""pagedkv: how an LLM server (SGLang is the reference) manages KV-cache memory on a GPU.

Layers, bottom-up (nothing below imports from above):

- ``pagedkv.model``, ``pagedkv.gpus``, ``pagedkv.sizing``: bytes per token, pool size,
  SGLang's ``mem_fraction_static`` and ``max_total_num_tokens``.
- ``pagedkv.pools``, ``pagedkv.allocator``: ``ReqToTokenPool``, ``MHATokenToKVPool``,
  ``TokenToKVPoolAllocator`` and ``PagedTokenToKVPoolAllocator``; ``pagedkv.contiguous``
  is the max-length baseline, ``pagedkv.workload`` makes seeded request streams.
- ``pagedkv.radix``: ``RadixCache``, the prefix tree over the pool's slots;
  ``pagedkv.prefix_workloads`` and ``pagedkv.prefix_serving`` serve token-id requests
  through it, ``pagedkv.prefix_trace`` records what a run did.
- ``pagedkv.kernels``: a Triton paged decode-attention kernel.
- ``pagedkv.scheduler``: the simulator (``PrefillAdder``, ``new_token_ratio``,
  ``retract_decode``) and ``simulate``.

The sizing layer is re-exported here (it imports no torch); import the others from their
modules::

    from pagedkv import get_gpu, load_model, plan_pool
    plan = plan_pool(load_model("llama-3-8b"), gpu=get_gpu("h100-sxm-80gb"))
"""

from pagedkv.errors import (
    AllocatorError,
    ConfigError,
    NotEnoughMemoryError,
    OutOfMemoryError,
    PagedKVError,
)
from pagedkv.gpus import GPU_PRESETS, GPUSpec, get_gpu
from pagedkv.model import MODEL_PRESETS, ModelSpec, load_model
from pagedkv.sizing import KVPoolPlan, batch_cap, default_mem_fraction_static, plan_pool

__version__ = "0.1.0"

__all__ = [
    "GPU_PRESETS",
    "MODEL_PRESETS",
    "AllocatorError",
    "ConfigError",
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
]
