"""Words the chapters define where they first use them but the glossary once lacked, one
:class:`~pagedkv.lessons.glossary_rules.Term` each (a read of the built book looked them up and
found nothing): a contiguous allocator's placement and shares (chapter 2), a retraction
episode (4), the compiled kernel's tensor-core instruction (6), the radix tree's protected
tokens (8) and two kinds of layer (9). Data only; they follow
:data:`pagedkv.lessons.glossary_terms_later.LATER_TERMS` in :data:`pagedkv.lessons.glossary.TERMS`.
"""

from __future__ import annotations

from pagedkv.lessons.analysis import EPISODE_GAP_STEPS
from pagedkv.lessons.glossary_rules import Term

ADDED_TERMS: tuple[Term, ...] = (
    Term("first fit", 2, "How a contiguous allocator places a reservation: at the lowest slot "
         "where a free run long enough for it starts (chapter 2's `ContiguousAllocator`).",
         "", r"first[- ]fit", listed=False,
         first_use="at the lowest slot where a long enough free run starts"),
    Term("Orca (Max, Pow2, Oracle)", 2, "A server that keeps each request's KV in one "
         "contiguous run; the vLLM paper compares paging with three versions of it, which "
         "reserve the model's maximum length (Max), the prompt plus its output length rounded "
         "up to a power of two (Pow2), or the prompt plus the true output length (Oracle, which "
         "no real server knows in advance).", "", r"\bOrca\b", listed=False,
         first_use="a server that keeps each request in one run"),
    Term("held ahead", 2, "The share of a pool held for tokens a request will still generate: "
         "the rest of its contiguous run, or, with pages, the part of its last page that it "
         "will still fill. Not yet filled, not wasted either.", "", r"held ahead",
         listed=False, first_use="slots already held for tokens the request will still generate"),
    Term("retraction episode (episode)", 4, "Retractions of one run that come in a burst, "
         f"fewer than {EPISODE_GAP_STEPS} decode steps after the one before, counted together: "
         "chapter 4 groups a run's retractions into them to see what the ratio was when each burst "
         "began.", "", r"\bepisodes?\b", listed=False, first_use="belong to one episode"),
    Term("HMMA", 6, "The tensor-core matrix multiply-accumulate instruction in NVIDIA's machine "
         "code (SASS) from sm_70 on: one warp multiplies small tiles of 16-bit numbers and sums "
         "in fp32. Chapter 6 counts them in the compiled kernel's loop; Hopper (sm_90) also has "
         "a wider form, `HGMMA`.", "", r"\bHMMA\b", listed=False, first_use="tensor-core `HMMA`"),
    Term("protected (`protected_size`)", 8, "Tokens of the radix tree that a running request "
         "reads, in nodes whose `lock_ref` is above zero: they cannot be evicted. The tree "
         "counts them apart from the evictable ones.",
         "`UnifiedRadixCache.protected_size()` (`mem_cache/unified_radix_cache.py`, 0.5.23); "
         "`RadixCache.protected_size_`, `protected_size()` (`mem_cache/radix_cache.py`, 0.5.9)",
         r"(?<![.\w])protected\b|protected_size", listed=False,
         first_use="is **protected**; the tree counts its tokens as protected"),
    Term("sliding-window attention (SWA)", 9, "A layer that attends only to the last $w$ "
         "tokens, its window, so it keeps at most $w + 1$ tokens' K and V per request however "
         "long the sequence grows. gpt-oss, Gemma 3 and Llama-4-Scout have such layers beside "
         "full-attention ones.", "`SWAKVPool` (`mem_cache/swa_memory_pool.py`)",
         r"sliding[- ]window attention", listed=False,
         first_use="keeps only the last tokens' K and V"),
    Term("linear attention", 9, "A layer that keeps no per-token K and V: it folds the "
         "sequence into a fixed-size state, the same size at any length (Qwen3-Next's Gated "
         "DeltaNet, Mamba). SGLang keeps each request's state in its own pool.",
         "`MambaPool` (`mem_cache/memory_pool.py`)", r"linear attention",
         listed=False, first_use="keeps a fixed-size state instead"),
)
