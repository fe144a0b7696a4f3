"""pagedkv: how an LLM server (SGLang is the reference) manages KV-cache memory on a GPU.

Layers, bottom-up (nothing below imports from above):

- ``pagedkv.model``, ``pagedkv.gpus``, ``pagedkv.sizing``: bytes per token, pool size,
  SGLang's ``mem_fraction_static`` and ``max_total_num_tokens``.
- pools and allocators (``ReqToTokenPool``, ``TokenToKVPoolAllocator``, paging).
- ``pagedkv.kernels``: a Triton paged decode-attention kernel.
- the scheduler simulator (``PrefillAdder``, ``new_token_ratio``, ``retract_decode``).
"""

from pagedkv.errors import (
    AllocatorError,
    ConfigError,
    NotEnoughMemoryError,
    OutOfMemoryError,
    PagedKVError,
)

__version__ = "0.1.0"

__all__ = [
    "AllocatorError",
    "ConfigError",
    "NotEnoughMemoryError",
    "OutOfMemoryError",
    "PagedKVError",
    "__version__",
]
