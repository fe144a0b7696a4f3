"""The book's words, one :class:`~pagedkv.lessons.glossary_rules.Term` each, in the order
chapter 1's list defines them (each before the next uses it); each names where SGLang has it
(0.5.23's file, with 0.5.9's where it differs). The first words are here; the later ones
(:data:`pagedkv.lessons.glossary_terms_later.LATER_TERMS`) follow them in :data:`TERMS`. Read
through :mod:`pagedkv.lessons.glossary`.
"""

from __future__ import annotations

from pagedkv.lessons.glossary_rules import IGNORE_EOS_RULE, LENGTHS, REQUEST_ROWS_RULE, Term
from pagedkv.lessons.glossary_terms_added import ADDED_TERMS
from pagedkv.lessons.glossary_terms_later import LATER_TERMS
from pagedkv.managers.config import SchedulerConfig

_CLIP = SchedulerConfig().clip_max_new_tokens

TERMS: tuple[Term, ...] = (
    Term("KV cache", 1, "The keys and values every past token leaves in every layer, kept so "
         "that later tokens can attend to it without recomputing them.", "", r"\bKV cache"),
    Term("HBM", 1, "High-bandwidth memory: the GPU's own memory, the card's memory size in the "
         "tables. It holds the weights, the KV cache and everything else the server keeps on "
         "the card.", "", r"\bHBM\b", listed=False),
    Term("$B_{\\max}$ (batch cap)", 1, "How many requests fit at once if each one grows to its "
         "full context $c$: $\\lfloor \\text{pool} / (c \\cdot \\text{cell}) \\rfloor$, the "
         "KV pool divided by the KV of $c$ tokens, rounded down. Chapter 1's rough upper "
         "estimate $B_{\\text{upper}}$ puts (HBM - weights) in place of the pool. A bound the book "
         "computes, not a setting of SGLang's. For a model with more than one pool, chapter 9 "
         "takes the smallest such count over its pools, and never more than the requests the "
         "server lets run at once.", "", r"B_\{\\max\}|B_max", listed=False),
    Term("MHA, GQA, MQA", 1, "How many key/value heads a layer keeps: multi-head attention (MHA) "
         "one per query head, grouped-query attention (GQA) one per group of query heads, "
         "multi-query attention (MQA) a single one. A token's KV shrinks with the KV heads "
         "(`num_key_value_heads` in the model's `config.json`).",
         "`ModelConfig.get_num_kv_heads`", r"\bGQA\b|\bMHA\b|\bMQA\b|grouped-query", listed=False),
    Term("MLA", 1, "Multi-head latent attention (DeepSeek's): each layer keeps one compressed "
         "latent vector (`kv_lora_rank` numbers) plus a small rotary part (`qk_rope_head_dim`) "
         "per token, shared by all heads, instead of a K and a V per KV head.",
         "`MLATokenToKVPool` (`mem_cache/memory_pool.py`)", r"\bMLA\b", listed=False),
    Term("`max_new_tokens`", 1, "The most tokens a request may generate, a sampling parameter the "
         "client sets. Until the request stops, the server cannot know how many it will really "
         "write, so it plans with this cap.", "`SamplingParams.max_new_tokens`",
         r"max_new_tokens", listed=False),
    Term("mini-sglang", 1, "A small teaching implementation of SGLang's ideas (prefix reuse, a "
         "paged pool, the scheduler) in far fewer lines, from SGLang's developers, in a separate "
         "repository. The book cites it for comparison, where its names or choices differ from "
         "SGLang's.", "",
         r"mini-sglang", listed=False),
    Term("KV slot (slot)", 1, "The room for one token's K and V in every layer: the unit of "
         "the KV pool, numbered from 0 (slot 0 is never handed out; with pages of $p$ slots, "
         "all of page 0, slots 0 to $p$ - 1, is withheld, chapter 3). \"Slot\" alone always "
         "means a KV slot.", "`out_cache_loc`, `TokenToKVPoolAllocator`", r"\bKV slots?\b"),
    Term("request row", 1, "One row of the request table (the page table), held by one "
         "running request: the KV slot of each of its tokens. SGLang keeps the free rows in "
         "`ReqToTokenPool.free_slots` and a request's row in `req_pool_idx`; 0.5.23 adds row "
         "0, a padding row never handed out.", "`ReqToTokenPool` (`mem_cache/memory_pool.py`)",
         r"request rows?\b"),
    Term("prefill", 1, "The forward pass over a request's prompt (or the part of it whose KV is "
         "not in the pool yet): "
         "it writes the prompt's KV in one pass (or, when the prompt is split into chunks, one "
         "chunk per step) "
         "and samples the first output token.",
         "`ForwardMode.EXTEND`", r"\bprefill"),
    Term("decode", 1, "A forward pass that feeds every running request its newest token: one "
         "new token of KV per request per step, and one sampled token each.",
         "`ForwardMode.DECODE`", r"\bdecode step|\bdecod"),
    Term("chunked prefill", 1, "Prefilling a long prompt in pieces of at most "
         "`chunked_prefill_size` tokens, one piece per step, so that one long prompt does not "
         "stall the running requests or need all its activations at once.",
         "`--chunked-prefill-size`", r"chunked prefill|chunked_prefill|prefill chunk"),
    Term("CUDA graph", 1, "A recording of one forward pass's GPU kernels for a fixed batch size, "
         "replayed at the cost of one launch. The captured graphs keep their buffers alive: "
         "memory outside the KV pool and the weights.",
         ("`model_executor/runner/decode_cuda_graph_runner.py` (0.5.23; "
          "0.5.9: `model_executor/cuda_graph_runner.py`); "
          "`--cuda-graph-max-bs-decode` (0.5.9: `--cuda-graph-max-bs`)"),
         r"CUDA[- ]graph"),
    Term("`mem_fraction_static`", 1, "The share of the GPU's free memory SGLang keeps for weights "
         "plus KV pool; the rest is left for activations and CUDA graphs.",
         "`--mem-fraction-static`", r"mem_fraction_static"),
    Term("cell size", 1, "The bytes one token's KV costs: 2 (K and V) x layers x KV heads x head "
         "size x bytes per number.", "`_compute_cell_size` (0.5.9: `get_cell_size_per_token`)",
         r"cell size"),
    Term("`max_total_num_tokens`", 1, "The pool's size in tokens (rounded down to whole pages).",
         "`ModelRunner.max_total_num_tokens`", r"max_total_num_tokens"),
    Term("`max_running_requests`", 1, "The most requests that may run at once, sized from the pool "
         "unless set. In 0.5.23 also the request rows handed out (the table has one more, "
         "padding row 0); 0.5.9 sizes its request rows from the pool and the context length "
         "unless it is set, all of them handed out.",
         "`--max-running-requests`, `resolve_max_num_reqs`", r"max_running_requests"),
    Term("page, `page_size`", 1, "The unit the allocator hands out: `page_size` consecutive "
         "KV slots of the pool (1 by default).", "`--page-size`", r"page_size|\bpage size"),
    Term("radix cache", 1, "A prefix tree over token ids whose nodes point at KV slots: a new "
         "request reuses the KV of any prefix already in it (chapter 8). On by default.",
         "`mem_cache/unified_radix_cache.py` (0.5.9: `radix_cache.py`, `RadixCache`)",
         r"radix cache|radix tree"),
    Term("retraction (retracted)", 1, "Taking a running request out of the batch when the next "
         "decode step does not fit: its KV is freed (except what the radix cache keeps), it "
         "keeps its output tokens and goes back to the queue, to be prefilled again later.",
         "`ScheduleBatch.retract_decode`", r"\bretract"),
    Term("cached (evictable)", 1, "KV the radix cache keeps of finished (or retracted) requests "
         "that no running request reads: reusable by a later request with the same prefix, "
         "and freed on demand, least recently used first.", "`evictable_size()`",
         r"\bevictable|\bcached\b"),
    Term("eviction", 1, "Freeing cached, evictable KV from the radix cache, least recently used "
         "leaves first, when the free list is short.", "`evict`", r"\bevict"),
    Term("`available_size`", 1, "Free KV slots in the pool: free pages times `page_size`. "
         "Cached, evictable KV is not in it.",
         "`TokenToKVPoolAllocator.available_size`", r"available_size"),
    Term("`new_token_ratio`", 1, "The share of each running request's remaining `max_new_tokens` "
         "(the most output tokens the request may generate, a sampling parameter) "
         "that admission assumes will still be written (chapter 4).",
         "`NewTokenRatioTracker` (0.5.9: `Scheduler.new_token_ratio`)", r"new_token_ratio"),
    Term("reserved", 1, "Memory admission holds back for the tokens running requests have not "
         f"written yet: their remaining `max_new_tokens`, clipped at {_CLIP:,} tokens per request "
         "(chapter 4 says why), times `new_token_ratio`. No "
         "KV slot is allocated for it; it only stops newcomers. " + IGNORE_EOS_RULE,
         "`_get_running_request_total_token_offset`", r"\breserv"),
    Term("attention backend", 1, "The library of attention kernels a server computes attention "
         "with, one per server (`--attention-backend`): each is handed the pool's slots in its "
         "own form. SGLang picks one by GPU and model unless told (chapter 3).",
         "`python/sglang/srt/layers/attention/`", r"attention backends?\b", listed=False,
         first_use="kernels that compute attention"),
    Term("Triton", 1, "A language and compiler for GPU kernels, written as Python functions. "
         "SGLang's fallback attention backend and chapter 6's decode kernel are written in it; "
         "without a GPU its interpreter runs a kernel on the CPU, slowly.",
         "`--attention-backend triton`", r"\bTriton\b", listed=False,
         first_use="a language for GPU kernels"),
    Term("speculative decoding", 1, "A small draft model proposes a few tokens that the served "
         "model checks in one forward pass, keeping those it agrees with: fewer passes per token, "
         "with KV slots allocated a few tokens ahead. The book leaves it out.",
         "`--speculative-algorithm`", r"speculative", listed=False, first_use="draft model"),
    Term("tensor parallelism (tp), pipeline parallelism (pp)", 1, "Two ways to spread one "
         "model over several GPUs: tensor parallelism (`--tp-size` $t$) splits every layer's "
         "weights and KV heads over $t$ GPUs that compute each layer together; pipeline "
         "parallelism (`--pp-size` $q$) gives each of $q$ GPUs a consecutive share of the layers.",
         "`--tp-size`, `--pp-size`", r"tensor[- ]parallel|tensor- and pipeline-parallel",
         listed=False, first_use="splits every layer's weights"),
    Term("DSA (NSA)", 1, "DeepSeek Sparse Attention, DeepSeek-V3.2's: a small indexer scores the "
         "cached tokens with a key per token and layer, kept beside the MLA latent in the same "
         "pool, and each query attends only to the best-scoring ones. SGLang 0.5.9 calls it NSA "
         "(native sparse attention).", "`DSATokenToKVPool` (`mem_cache/memory_pool.py`; 0.5.9: "
         "`NSATokenToKVPool`), `--attention-backend dsa` (0.5.9: `nsa`)",
         r"\bDSA\b|\bNSA\b|sparse[- ]attention", listed=False,
         first_use="DeepSeek Sparse Attention"),
    Term("data-parallel attention (dp-attention)", 1, "Each GPU of a tensor-parallel group runs "
         "attention for its own share of the requests, with its own KV pool, instead of every GPU "
         "holding some heads of every request; used mainly for MLA models. The book leaves it out.",
         "`--attn-dp-size` (0.5.9: `--enable-dp-attention`)",
         r"data-parallel attention|dp[-_]attention", listed=False, first_use="its own share of the requests"),
    Term("DeepEP", 1, "DeepSeek's library that sends tokens to the GPUs holding their experts "
         "when a model's experts are spread over several GPUs; SGLang keeps its communication "
         "buffers on the card. The book leaves it out.", "`--moe-a2a-backend deepep`", r"DeepEP",
         listed=False, first_use="sends tokens"),
    *LENGTHS,
    Term("`req_to_token`", 1, "The request table, the page table with one entry per token: "
         "each request row holds the KV slot of each of its request's tokens. "
         + REQUEST_ROWS_RULE.replace("The request table `req_to_token` hands out", "It hands out"),
         "`ReqToTokenPool.req_to_token`", r"req_to_token"),
    Term("`PrefillAdder`", 1, "The object that walks the waiting queue once per prefill pass and "
         "decides who is admitted.", "`managers/schedule_policy.py`", r"PrefillAdder"),
    *LATER_TERMS,
    *ADDED_TERMS,
)
