"""The book's words, one :class:`~pagedkv.lessons.glossary_rules.Term` each, in the order
chapter 1's list defines them (each before the next uses it); each names where SGLang has it
(0.5.23's file, with 0.5.9's where it differs). Read through :mod:`pagedkv.lessons.glossary`.
"""

from __future__ import annotations

from pagedkv.lessons.glossary_rules import IGNORE_EOS_RULE, LENGTHS, REQUEST_ROWS_RULE, Term

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
         "computes, not a setting of SGLang's.", "", r"B_\{\\max\}|B_max", listed=False),
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
         ("`model_executor/runner/decode_cuda_graph_runner.py` (0.5.23); "
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
         "written yet: their remaining `max_new_tokens` (clipped) times `new_token_ratio`. No "
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
    Term("`req_to_token`", 3, "The request table, the page table with one entry per token: "
         "each request row holds the KV slot of each of its request's tokens. "
         + REQUEST_ROWS_RULE.replace("The request table `req_to_token` hands out", "It hands out"),
         "`ReqToTokenPool.req_to_token`", r"req_to_token"),
    Term("`PrefillAdder`", 1, "The object that walks the waiting queue once per prefill pass and "
         "decides who is admitted.", "`managers/schedule_policy.py`", r"PrefillAdder"),
    Term("`max_prefill_tokens`", 4, "A cap on the prompt tokens one admission pass takes "
         "(`--max-prefill-tokens`; the cheat sheet gives the default). The first request of a "
         "pass is exempt; chapter 4 says when each release refuses a later one that would cross "
         "it.", "`PrefillAdder.rem_input_tokens`", r"max_prefill_tokens|max-prefill-tokens",
         listed=False),
    Term("`rem_total_tokens`", 4, "`PrefillAdder`'s room for newcomers in one admission pass: "
         "`available_size` plus evictable KV, minus the running requests' reservations, minus "
         "the charges of the requests admitted earlier in the pass.",
         "`PrefillAdder.rem_total_tokens`", r"rem_total_tokens", listed=False),
    Term("`schedule_conservativeness`", 4, "A server setting that scales the `new_token_ratio` "
         "admission starts from: above its default, admission reserves more for running requests "
         "and admits fewer; below it, admits more and retracts more often.",
         "`--schedule-conservativeness`", r"conservativeness", listed=False),
    Term("overlap loop, normal loop", 4, "SGLang's two scheduler loops. The overlap loop "
         "(`event_loop_overlap`, the default) schedules the next batch while the GPU still runs "
         "the current one, so it decides before it has that step's results; the normal loop "
         "(`event_loop_normal`, `--disable-overlap-schedule`) waits for each step's results "
         "first.", "`Scheduler.event_loop_overlap`, `Scheduler.event_loop_normal` "
         "(`managers/scheduler.py`)",
         r"overlap loop|normal loop|disable[-_]overlap[-_]schedule", listed=False),
    Term("ignore-EOS request", 4, "A request sent with `ignore_eos`: it does not stop at an "
         "end-of-sequence token, so it writes exactly its `max_new_tokens`. Benchmarks use it to "
         "fix the output lengths.", "`SamplingParams.ignore_eos`", r"ignore[-_ ]EOS",
         listed=False),
    Term("FCFS", 4, "First come, first served: the waiting queue is walked in arrival order.",
         "`--schedule-policy fcfs`", r"\bFCFS\b|first-come-first-served", listed=False),
    Term("roofline model", 4, "A time estimated from the card's peaks: the larger of the "
         "bytes to move over its memory bandwidth and the arithmetic over its FLOP rate. A lower "
         "bound, not a measurement; chapter 6 holds a kernel to it.", "", r"roofline",
         listed=False, first_use="peak bandwidth"),
    Term("`CONTINUE`, `NO_TOKEN`, `OTHER`", 4, "`PrefillAdder`'s answer for one request: "
         "`CONTINUE` (admitted, try the next one), `NO_TOKEN` (memory refuses it: the pass "
         "ends), `OTHER` (another budget, the chunk or `max_prefill_tokens`, ends the pass).",
         "`AddReqResult`", r"\bCONTINUE\b|NO_TOKEN"),
    Term("`batch_is_full`", 4, "Set when admission refuses a request for memory (0.5.23: only if "
         "something was admitted or is running); while set, the scheduler does not walk the "
         "queue again, until the running batch shrinks (0.5.23: or nothing is running).",
         "`ScheduleBatch.batch_is_full`", r"batch_is_full"),
    Term("`#pending-token`", 4, "In 0.5.23's prefill log line: the prompt tokens still to "
         "prefill over the whole waiting queue (and the rest of a chunked prompt). 0.5.9's line "
         "has no such field.", "`metrics_reporter.py` (0.5.23)", r"#pending-token"),
    Term("token usage", 1, "In SGLang's log lines: (`max_total_num_tokens` - `available_size` - "
         "evictable) / `max_total_num_tokens`, the share of the pool holding tokens with cached, "
         "evictable ones counted as free.",
         "`managers/scheduler_components/pool_stats_observer.py` (0.5.23)", r"token usage"),
    Term("`check_decode_mem`", 3, "The test before each decode step: does the allocator have the "
         "pages the step will open? It evicts from the radix cache first, then says yes or no.",
         "`ScheduleBatch.check_decode_mem`", r"check_decode_mem"),
    Term("`prepare_for_decode`", 5, "The decode step's allocation: one KV slot per running "
         "request for its newest token, a fresh page where the last one is full. With pages larger than "
         "one it first asks the radix cache for room for a whole page per request: SGLang 0.5.23 "
         "evicts only what the free list lacks, SGLang 0.5.9 evicts the whole amount whenever the "
         "free list is short.", "`ScheduleBatch.prepare_for_decode`, `alloc_for_decode` "
         "(`mem_cache/allocation.py`, 0.5.23; `mem_cache/common.py`, 0.5.9)", r"prepare_for_decode"),
    Term("`alloc_for_decode`, `alloc_paged_token_slots_decode`", 5, "One job, two functions: "
         "`alloc_for_decode` is the decode step's allocation that `prepare_for_decode` calls; "
         "with page size 1 it takes one KV slot per request (`alloc_token_slots`), with larger "
         "pages it hands the step to `alloc_paged_token_slots_decode`, its paged half, which "
         "first evicts room for a whole page per request, then takes the slots "
         "(`alloc_decode`). Both releases have both: SGLang 0.5.23 in `mem_cache/allocation.py`, "
         "0.5.9 in `mem_cache/common.py`.",
         "`mem_cache/allocation.py` (0.5.23); `mem_cache/common.py` (0.5.9)",
         r"alloc_for_decode|alloc_paged_token_slots_decode"),
    Term("`evict_to_free_tokens`, `evict_for_alloc`", 5, "One job, split between the allocator "
         "and the tree, in SGLang 0.5.23: the allocator's `evict_to_free_tokens` counts the "
         "shortfall (the tokens asked for minus `available_size`) and asks the tree's "
         "`evict_for_alloc` for only that, which evicts leaves until the allocator has the room. "
         "Every eviction for an allocation reaches them through `evict_from_tree_cache`. "
         "SGLang 0.5.9 has neither: its `evict_from_tree_cache` calls the tree's `evict` with "
         "the whole amount whenever the free list is short.",
         "`mem_cache/allocator/base.py`, `mem_cache/unified_radix_cache.py` (0.5.23); "
         "`mem_cache/common.py` (0.5.9)", r"evict_to_free_tokens|evict_for_alloc"),
    Term("`release_req`", 5, "What a retraction does to each victim: free its KV outside the "
         "radix cache and its request row, then evict room for the requests that stay: in "
         "0.5.23 only what the free list lacks of that room, in 0.5.9 the whole amount whenever "
         "the free list is short.",
         "`ScheduleBatch.release_req`", r"release_req"),
    Term("ShareGPT", 2, "A public data set of real ChatGPT conversations; its prompt and answer "
         "lengths are the usual stand-in for real traffic in serving benchmarks.", "",
         r"ShareGPT", listed=False),
    Term("`#token`", 2, "In SGLang's decode log line: the pool's tokens that are neither free "
         "nor evictable, `max_total_num_tokens` - `available_size` - evictable (the running "
         "requests' KV and the prefixes they hold in the radix cache).",
         ("`managers/scheduler_components/pool_stats_observer.py` (0.5.23); "
          "`managers/scheduler_metrics_mixin.py` (0.5.9)"), r"#token\b",
         listed=False, first_use="neither free nor evictable"),
    Term("FlashInfer, FA3, FA4, TRT-LLM, FlashMLA", 3, "SGLang's other attention backends on "
         "NVIDIA GPUs: FlashInfer, a kernel library for serving; FA3 and FA4, FlashAttention 3 "
         "and 4; TRT-LLM, the kernels of NVIDIA's TensorRT-LLM (`trtllm_mha`, `trtllm_mla`); "
         "FlashMLA, DeepSeek's kernels for MLA models. Chapter 3 says which is the default where.",
         "`--attention-backend flashinfer|fa3|fa4|trtllm_mha|flashmla`",
         r"FlashInfer|\bFA[34]\b|TRT-LLM|FlashMLA", listed=False, first_use="FlashAttention 3"),
    Term("attention sinks", 3, "Learned logits, one per head, added to every attention softmax as "
         "if each query could also attend to a token that is always there (gpt-oss has them). "
         "Chapter 3 says which attention backend SGLang picks for such models.", "",
         r"attention sinks?", listed=False),
    Term("prefill/decode disaggregation", 3, "Running prefill and decode on different GPUs: the "
         "prefill side computes a prompt's KV and sends it to the decode side, which generates. "
         "Chapter 3 says how SGLang's allocator differs there.", "`--disaggregation-mode`",
         r"disaggregat", listed=False),
    Term("split-KV", 6, "Cutting one request's KV into chunks that separate GPU thread blocks "
         "attend to in parallel, then merging their partial results exactly with their "
         "log-sum-exp (\"flash-decoding\"), so a few long requests still keep the whole GPU busy "
         "during decode.", "stage 1 and stage 2 of the Triton decode kernel "
         "(0.5.23: `python/sglang/kernels/ops/attention/`; 0.5.9: "
         "`python/sglang/srt/layers/attention/triton_ops/`)", r"split[- ]KV", listed=False),
    Term("compute capability (`sm_XY`)", 3, "A GPU architecture's version, major and minor, "
         "written `sm_` followed by both digits (sm_90 is compute capability 9.0, Hopper). "
         "SGLang picks its default attention backend by it, and Triton compiles a kernel for "
         "one compute capability; chapter 6 lists each card's.", "", r"compute capability|\bsm_\d",
         listed=False, first_use="compute capability"),
    Term("SM (streaming multiprocessor)", 6, "One of a GPU's compute units: it runs a few "
         "programs (thread blocks) at once, which share its registers and shared memory. A "
         "kernel keeps the GPU busy only with enough programs for every SM.", "",
         r"\bSMs?\b|streaming multiprocessor", listed=False, first_use="streaming multiprocessor"),
    Term("`lock_ref`", 8, "A radix-tree node's count of running requests that read its KV: a "
         "node with `lock_ref` above zero is not evictable. A request locks the nodes of its "
         "matched prefix until it finishes. In 0.5.23 the request holds a `TreeLock`, the receipt "
         "`UnifiedRadixCache.lock` returns, and gives it back with `unlock`.",
         "`TreeNode.lock_ref` (0.5.9); `TreeLock` from `UnifiedRadixCache.lock` (0.5.23)",
         r"lock_ref", listed=False),
    Term("LRU", 8, "Least recently used: the radix cache evicts first the leaves whose last "
         "access is oldest.", "`--radix-eviction-policy`", r"\bLRU\b", listed=False),
    Term("`ChunkCache`", 8, "SGLang 0.5.9's stand-in for the radix cache when it is off and "
         "chunked prefill is on: it keeps only a chunked prompt's earlier chunks, for that "
         "prompt's next chunk, and shares nothing between requests. SGLang 0.5.23 builds a "
         "disabled `UnifiedRadixCache` instead.", "`mem_cache/chunk_cache.py` (0.5.9)",
         r"ChunkCache", listed=False, first_use="shares nothing between requests"),
    Term("LoRA adapter", 8, "Low-rank adaptation: a small pair of matrices per layer that "
         "fine-tunes a shared base model; one server can serve many adapters at once, and a "
         "prefix's KV differs by adapter.", "`--enable-lora`", r"\bLoRA\b", listed=False,
         first_use="low-rank"),
    Term("HiCache", 8, "SGLang's hierarchical cache: prefixes the radix cache evicts from the "
         "GPU are kept in host memory and copied back when a request matches them. The book "
         "leaves it out.", "`--enable-hierarchical-cache`", r"HiCache|hierarchical cache",
         listed=False, first_use="host memory"),
    Term("hybrid model", 9, "A model whose layers are not all full attention: some attend only "
         "to a sliding window of recent tokens, or keep a fixed-size linear-attention state "
         "(Gated DeltaNet, Mamba). SGLang gives those layers their own pool beside the KV pool.",
         "", r"\bhybrid models?\b", listed=False),
    Term("mixture of experts (MoE)", 9, "Many expert MLPs per layer, a few of them used for each "
         "token; every expert stays in memory, so the weights are the whole checkpoint's. The KV "
         "cache is the attention's, as without experts.", "", r"\bMoE\b|mixture of experts"),
    Term("sliding-window pool (SWA pool)", 9, "A sliding-window hybrid's second KV pool, for its "
         "window layers: a request needs at most window + 1 tokens there. SGLang sizes it at "
         "`--swa-full-tokens-ratio` times the full pool's tokens: 0.5.23 with "
         "`HybridSWAPoolConfigurator`; 0.5.9 profiles the pool at full length and splits it in "
         "`set_num_tokens_hybrid_swa`.",
         "`SWAKVPool` (`mem_cache/swa_memory_pool.py`), `HybridSWAPoolConfigurator` (0.5.23), "
         "`ModelRunner.set_num_tokens_hybrid_swa` (0.5.9)",
         r"SWA pool|sliding-window pool"),
    Term("state slot", 9, "One request's fixed-size state for every linear-attention layer "
         "(Gated DeltaNet, Mamba) of a hybrid, whatever the sequence's length; the state-slot "
         "count caps the running requests.", "`MambaPool`, `HybridReqToTokenPool` "
         "(`mem_cache/memory_pool.py`)", r"state slot"),
)
