"""The words of chapters 2-9, and the later entries of chapter 1's list (admission's, the log
lines', the backends'), one :class:`~pagedkv.lessons.glossary_rules.Term` each, in the order
they follow :mod:`pagedkv.lessons.glossary_terms`'s first words. Data only; read through
:mod:`pagedkv.lessons.glossary`.
"""

from __future__ import annotations

from pagedkv.hybrid_pools import (
    MAMBA_SLOTS_PER_REQUEST_WITH_RADIX,
    MAMBA_TRACK_INTERVAL,
    mamba_slots_per_request,
    mamba_tracking_slots,
)
from pagedkv.lessons.glossary_rules import Term
from pagedkv.managers.config import SchedulerConfig
from pagedkv.mem_cache.mamba_radix_cache import MAMBA_CHUNK_SIZE
from pagedkv.units import GB, GiB

#: SGLang 0.5.23's default server (the overlap loop on): the radix cache's ``extra_buffer``
#: strategy, its track slots and the state slots a running request counts.
_TRACK_SLOTS = mamba_tracking_slots(disable_radix_cache=False, page_size=1,
                                    disable_overlap_schedule=False, auto_extra_buffer=True)
_SLOTS_WITH_RADIX = mamba_slots_per_request(False, _TRACK_SLOTS)

_CLIP = SchedulerConfig().clip_max_new_tokens
_GIB_OVER_GB = (GiB / GB - 1) * 100

LATER_TERMS: tuple[Term, ...] = (
    Term("`max_prefill_tokens`", 4, "A cap on the prompt tokens one admission pass takes "
         "(`--max-prefill-tokens`; the cheat sheet gives the default). The first request of a "
         "pass is exempt; chapter 4 says when each release refuses a later one whose page-rounded "
         "prompt would reach or cross what is left of it.", "`PrefillAdder.rem_input_tokens`",
         r"max_prefill_tokens|max-prefill-tokens", listed=False),
    Term("`rem_total_tokens`", 4, "`PrefillAdder`'s room for newcomers in one admission pass: "
         "`available_size` plus evictable KV, minus the running requests' reservations, minus "
         "the charges of the requests admitted earlier in the pass.",
         "`PrefillAdder.rem_total_tokens`", r"rem_total_tokens", listed=False),
    Term("`schedule_conservativeness`", 4, "A server setting that scales the `new_token_ratio` "
         "admission starts from: above its default, admission reserves more for running requests "
         "and admits fewer; below it, admits more and retracts more often.",
         "`--schedule-conservativeness`", r"conservativeness", listed=False,
         first_use="a server setting that scales"),
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
    Term("routing key", 4, "A string the client sends with a request in the `x-smg-routing-key` "
         "HTTP header, the same for requests that belong together (one user's, say). "
         "`--schedule-policy routing-key` admits first the waiting requests whose key the running "
         "batch holds most often.", "`SchedulePolicy._sort_by_routing_key` "
         "(`managers/schedule_policy.py`), `OpenAIServingBase.extract_routing_key`",
         r"routing key", listed=False, first_use="x-smg-routing-key"),
    Term("roofline model", 4, "A time estimated from the card's peaks: the larger of the "
         "bytes to move over its memory bandwidth and the arithmetic over its FLOP rate. A lower "
         "bound, not a measurement; chapter 6 holds a kernel to it.", "", r"roofline",
         listed=False, first_use="peak bandwidth"),
    Term("`CONTINUE`, `NO_TOKEN`, `OTHER`", 4, "`PrefillAdder`'s answer for one request: "
         "`CONTINUE` (admitted, try the next one), `NO_TOKEN` (memory refuses it: the pass "
         "ends), `OTHER` (another budget, the chunk or `max_prefill_tokens`, ends the pass).",
         "`AddReqResult`", r"\bCONTINUE\b|NO_TOKEN"),
    Term("`batch_is_full`", 4, "Set when admission refuses a request for memory (0.5.23: only if "
         "something was admitted or is running), or when the requests it admits reach the "
         "number that may still be admitted (`max_running_requests` less the running ones; "
         "0.5.23: also at most the free request rows); while set, the scheduler does not walk the "
         "queue again, until the running batch shrinks (0.5.23: or nothing is running).",
         "`ScheduleBatch.batch_is_full`", r"batch_is_full"),
    Term("`#pending-token`", 4, "In 0.5.23's prefill log line: the prompt tokens still to "
         "prefill over the whole waiting queue (and the rest of a chunked prompt). 0.5.9's line "
         "has no such field.", "`metrics_reporter.py` (0.5.23)", r"#pending-token"),
    Term("token usage", 1, "In SGLang's log lines: (`max_total_num_tokens` - `available_size` - "
         "evictable) / `max_total_num_tokens`, the share of the pool holding tokens with cached, "
         "evictable ones counted as free.",
         ("`managers/scheduler_components/pool_stats_observer.py` (0.5.23); "
          "`managers/scheduler_metrics_mixin.py` (0.5.9)"), r"token usage"),
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
         r"ShareGPT", listed=False, first_use="a public set of ChatGPT conversations"),
    Term("vLLM", 2, "An open-source LLM server; its paper (Kwon et al., SOSP 2023: the ACM Symposium on "
         "Operating Systems Principles) introduced "
         "paged KV memory (PagedAttention) and is the book's source for the cost of keeping "
         "each request in one contiguous run.", "", r"\bvLLM\b", listed=False,
         first_use="vLLM is an LLM server"),
    Term("ROCm", 1, "AMD's GPU software stack, its counterpart of NVIDIA's CUDA: SGLang runs on "
         "AMD GPUs through it.", "", r"\bROCm\b", listed=False,
         first_use="AMD's GPU software stack"),
    Term("FasterTransformer", 6, "NVIDIA's earlier inference library, which kept each "
         "request's KV in one contiguous buffer; the vLLM paper compares its paged kernel "
         "with it.", "", r"FasterTransformer", listed=False,
         first_use="NVIDIA's earlier inference library"),
    Term("`#token`", 2, "In SGLang's decode log line: the pool's tokens that are neither free "
         "nor evictable, `max_total_num_tokens` - `available_size` - evictable (the running "
         "requests' KV and the prefixes they hold in the radix cache).",
         ("`managers/scheduler_components/pool_stats_observer.py` (0.5.23); "
          "0.5.9: printed by `log_decode_stats` in `managers/scheduler_metrics_mixin.py`, "
          "counted by `_get_token_info` in `managers/scheduler_runtime_checker_mixin.py`"),
         r"#token\b",
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
         r"attention sinks?", listed=False, first_use="always there"),
    Term("EAGLE", 3, "A speculative-decoding method whose draft model, a light one that reads the "
         "served model's hidden states, proposes a tree of candidate tokens for the served model "
         "to check in one pass; `--speculative-eagle-topk` is how many candidates each draft "
         "step keeps (the tree's branching). The book leaves it out.",
         "`--speculative-algorithm EAGLE`, `--speculative-eagle-topk`", r"\bEAGLE\b",
         listed=False),
    Term("prefill/decode disaggregation", 3, "Running prefill and decode on different GPUs: the "
         "prefill side computes a prompt's KV and sends it to the decode side, which generates. "
         "Chapter 3 says how SGLang's allocator differs there.", "`--disaggregation-mode`",
         r"disaggregat", listed=False, first_use="on different GPUs"),
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
    Term("Gated DeltaNet", 9, "The linear-attention layer of Qwen3-Next (and Qwen3.5): instead of "
         "a K and V per token it keeps a fixed-size state, a matrix updated at every token by a "
         "gated delta rule plus a short convolution buffer, the same size at any length.",
         "`Qwen3GatedDeltaNet` (`models/qwen3_next.py`)", r"Gated DeltaNet", listed=False,
         first_use="keeps no per-token K and V"),
    Term("hybrid model", 1, "A model whose layers are not all full attention: some attend only "
         "to a sliding window of recent tokens, or keep a fixed-size linear-attention state "
         "instead of a K and a V per token (chapter 9 names the kinds). SGLang gives those "
         "layers their own pool beside the KV pool.",
         "", r"\bhybrid (models?|presets?)\b", listed=False,
         first_use="models whose layers are not all full attention"),
    Term("mixture of experts (MoE)", 9, "Many expert MLPs per layer, a few of them used for each "
         "token; every expert stays in memory, so the weights are the whole checkpoint's. The KV "
         "cache is the attention's, as without experts.", "", r"\bMoE\b|mixture of experts"),
    Term("sliding-window pool (SWA pool)", 9, "A sliding-window hybrid's second KV pool, for its "
         "window layers: a request needs window + 1 tokens there, and holds up to "
         "`SGLANG_SWA_EVICTION_INTERVAL` more (0.5.23; 0.5.9 has no such variable and frees "
         "every `sliding_window_size` decode steps), since SGLang frees the tokens that left "
         "the window in batches (`maybe_evict_swa`, chapter 9). SGLang sizes it at "
         "`--swa-full-tokens-ratio` times the full pool's tokens: 0.5.23 with "
         "`HybridSWAPoolConfigurator`; 0.5.9 profiles the pool at full length and splits it in "
         "`set_num_tokens_hybrid_swa`.",
         "`SWAKVPool` (`mem_cache/swa_memory_pool.py`), `HybridSWAPoolConfigurator` (0.5.23), "
         "`ModelRunner.set_num_tokens_hybrid_swa` (0.5.9)",
         r"SWA pool|sliding-window pool"),
    Term("track slot", 9, "A slot of a linear-attention hybrid's state pool that a running "
         "request holds beside its own state: SGLang copies the request's state into it at "
         "checkpoints (where a prefill ends, rounded down to the request's *checkpoint grid*, "
         "SGLang 0.5.23's `mamba_checkpoint_grid`: steps of the model's state chunk, its "
         f"`mamba_chunk_size` or {MAMBA_CHUNK_SIZE} tokens where it sets none, or of the page "
         f"size where pages are longer; and every {MAMBA_TRACK_INTERVAL} decode tokens, "
         "`--mamba-track-interval`) so that "
         "the radix tree can keep that state for the prefix. Track slots come with the "
         "`extra_buffer` value of `--mamba-radix-cache-strategy` (0.5.9: "
         "`--mamba-scheduler-strategy`), whose other values are `no_buffer` (no track slots; "
         "pages of one token only, and the overlap loop turned off) and `auto`, the default, "
         "which 0.5.23 resolves to `extra_buffer` when the overlap loop is on or pages are longer "
         "than one token and 0.5.9 always to `no_buffer`. With the overlap loop a request has "
         f"{_TRACK_SLOTS} that take turns (SGLang's `mamba_ping_pong_track_buffer`), since the "
         "loop learns of a checkpoint a step late: one is written while the other still holds "
         "the last checkpoint. Without it, 1.",
         "`get_mamba_tracking_slots` (`mem_cache/allocation_sizing.py`), "
         "`_mamba_radix_cache_resolution` (`arg_groups/overrides.py`); 0.5.9 "
         "`ServerArgs.__post_init__`", r"track slot"),
    Term("state slot", 9, "A fixed-size state for every linear-attention layer (Gated DeltaNet, "
         "Mamba) of a hybrid, whatever the sequence's length. A running request holds one, yet "
         f"with the radix cache on SGLang counts {MAMBA_SLOTS_PER_REQUEST_WITH_RADIX} per running "
         "request when it caps the running requests by the state-slot count "
         "(`MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO`, both releases): the same pool keeps "
         "the states the radix tree holds for cached prefixes, and a request's hand-over from "
         "prefill to decode needs about that many at its peak (SGLang's comment in "
         f"`_calculate_mamba_ratio`). The `extra_buffer` strategy adds the request's track slots: "
         f"{_SLOTS_WITH_RADIX} ({MAMBA_SLOTS_PER_REQUEST_WITH_RADIX} + {_TRACK_SLOTS}) by "
         "default in 0.5.23, none in 0.5.9, whose default is `no_buffer`. With "
         "`--disable-radix-cache`, 1.",
         "`MambaPool`, `HybridReqToTokenPool` "
         "(`mem_cache/memory_pool.py`)", r"state slot"),
    # the third first read found these used without a definition
    Term("GB, GiB", 1, f"Two units of memory: a GB is $10^9$ bytes, a GiB $2^{{30}}$ bytes, "
         f"{_GIB_OVER_GB:.1f} % more. A card's name rounds its memory (the H100's \"80GB\" is "
         "neither); the book sizes a card by what its driver reports. SGLang's start-up log divides by "
         "$2^{30}$ but prints \"GB\". The book always says which one it means.", "",
         r"\bGiB\b", listed=False, first_use="$10^9$ against $2^{30}$ bytes"),
    Term("internal fragmentation", 2, "Memory wasted inside a block that was handed out: its "
         "owner holds it but does not use it (a reservation's unused tail, the empty end of a "
         "request's last page).", "", r"internal fragmentation", listed=False,
         first_use="wasted space *inside* a block"),
    Term("external fragmentation", 2, "Free memory split into pieces, none large enough for the "
         "next contiguous block although together they would be. Paging removes it (chapter 3).",
         "", r"external fragmentation", listed=False, first_use="free space split into pieces"),
    Term("$\\lceil x \\rceil_\\text{page}$ (`ceil_page`)", 4, "$x$ tokens rounded up to whole "
         "pages, $p \\lceil x/p \\rceil$ slots: what admission charges for a prompt's tokens.",
         "`PrefillAdder.ceil_paged_tokens`", r"rceil_\\text\{page\}|ceil_page", listed=False,
         first_use="rounded **up**"),
    Term("CLIP (`CLIP_MAX_NEW_TOKENS`)", 4, f"SGLang's cap on how much of one request's "
         f"`max_new_tokens` admission counts, {_CLIP:,} tokens unless "
         "`SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION` sets another (chapter 4 says why).",
         "`managers/schedule_policy.py`, `CLIP_MAX_NEW_TOKENS`",
         r"CLIP_MAX_NEW_TOKENS|(?-i:\bCLIP\b)", listed=False, first_use="clipped at"),
    Term("head-of-line blocking", 4, "The first waiting request that does not fit stops the "
         "admission pass, so the requests behind it wait although smaller ones would fit.", "",
         r"head-of-line", listed=False, first_use="holds up all behind it"),
    Term("mixed chunked prefill", 4, "Putting the running requests' decode tokens into the same "
         "forward pass as a prefill chunk (`--enable-mixed-chunk`, off by default); admission's "
         "budgets then start that many tokens lower (`num_mixed_decode_tokens`).",
         "`--enable-mixed-chunk`", r"mixed chunked prefill|enable-mixed-chunk", listed=False,
         first_use="off by default"),
    Term("ModelRunner", 1, "SGLang's object that loads the model on one GPU, measures its free "
         "memory, builds the KV pool and runs each forward pass. It sizes the pool itself in 0.5.9 "
         "(`init_memory_pool`); 0.5.23 hands the sizing to a `KVCacheConfigurator`.",
         ("`model_executor/model_runner.py`; 0.5.23's configurator: "
          "`mem_cache/kv_cache_configurator.py`"), r"\bModelRunner\b", listed=False,
         first_use="loads the model on a GPU"),
    Term("`ptxas`", 6, "NVIDIA's assembler: it turns PTX, the portable GPU assembly Triton emits, "
         "into SASS, the machine code of one GPU architecture.", "", r"ptxas", listed=False,
         first_use="NVIDIA's assembler"),
    Term("Mamba, Mamba state", 8, "Mamba layers, like other linear-attention layers, keep one "
         "fixed-size state per request instead of a K and V per token; SGLang calls every such "
         "state Mamba state, whatever the layer.", "`MambaPool` (`mem_cache/memory_pool.py`)",
         r"\bMamba\b", listed=False, first_use="fixed-size state per request"),
    Term("cache salt", 8, "A per-request key (`cache_salt`) that puts a request's prefixes in a "
         "namespace of their own: only requests with the same salt share KV in the radix cache.",
         "`GenerateReqInput.cache_salt`, `extra_key`", r"cache salts?", listed=False,
         first_use="same salt share prefixes"),
    # a fourth first read found these used before (or without) a definition
    Term("tensor cores", 6, "A GPU's units that multiply small matrices of 16-bit (or narrower) "
         "numbers in one instruction, summing in fp32 (sm_70 and later); Triton's `tl.dot` "
         "runs on them for 16-bit operands from sm_80 on (Triton 3.9 does not use the "
         "Turing cards' tensor cores, sm_75: chapter 6).", "", r"tensor[- ]cores?", listed=False,
         first_use="multiply small matrices"),
    # the twelfth read found this used before its definition
    Term("FMA (fused multiply-add)", 6, "One instruction that computes `a * b + c` with a "
         "single rounding; a GPU's fp32 units do one per thread per instruction (`FFMA` in "
         "the compiled code). A matrix product done without tensor cores costs one per "
         "multiply.", "", r"\bFMAs?\b|fused multiply-add", listed=False,
         first_use="fused multiply-add"),
    Term("warp", 6, "32 threads of one program that a GPU issues each instruction to at once; "
         "a program of chapter 6's kernel runs several.", "", r"\bwarps?\b", listed=False,
         first_use="32 threads"),
    Term("`kv_last_page_len`", 6, "FlashInfer's count of the tokens in each request's last "
         "page: SGLang plans FlashInfer with pages of 1 token, so it is always 1.",
         "`layers/attention/flashinfer_backend.py`", r"kv_last_page_len", listed=False,
         first_use="tokens in a request's last page"),
    Term("rope scaling factor", 5, "`rope_scaling`'s `factor` in a model's `config.json`: how "
         "far the rotary position embedding is stretched beyond the positions the model was "
         "trained on. SGLang multiplies `max_position_embeddings` by it to get the context length "
         "when it finds one (0.5.23 finds none for Gemma 3, chapter 5's table of release changes).",
         "`get_context_length` (`utils/hf_transformers/common.py`; 0.5.9: "
         "`utils/hf_transformers_utils.py`)", r"rope scaling|rope factor|rope_scaling", listed=False),
)
