"""What SGLang prints and reports about the pools it built: :class:`KVPoolPlan`.

:func:`pagedkv.sizing.plan_pool` makes the plan; this module holds it, with the start-up lines
(in the named release's words: ``model_executor/model_runner.py`` ``ModelRunner.load_model``,
``mem_cache/memory_pool.py`` ``_finalize_allocation_log``, ``managers/scheduler.py``
``Scheduler.__init__``; a hybrid's pools: :func:`allocation_lines`), its JSON summary and the
two request limits that follow from the pool (``max_req_input_len``, ``B_max``).
"""

from __future__ import annotations

from dataclasses import dataclass

from pagedkv.errors import check_positive_int
from pagedkv.releases import DEFAULT_SGLANG_VERSION, as_release
from pagedkv.units import GiB


def max_req_input_len(max_total_num_tokens: int, context_len: int) -> int:
    """SGLang's ``max_req_input_len``: ``min(context_len - 1, max_total_num_tokens - 1) - 5``.

    A prompt of this many tokens or more is refused ("Input length exceeds the maximum
    allowed length"; it is cut to fit only with ``--allow-auto-truncate``), so the longest
    accepted prompt is ``min(context_len, max_total_num_tokens) - 7``.
    Source: ``TpModelWorker.__init__`` (``managers/tp_worker.py``, 0.5.9 and 0.5.23).
    """
    check_positive_int("max_total_num_tokens", max_total_num_tokens)
    check_positive_int("context_len", context_len)
    return min(context_len - 1, max_total_num_tokens - 1) - 5


def batch_cap(pool_bytes: float, context_len: int, cell_size: int) -> int:
    """``B_max = floor(pool / (context * bytes_per_token))``: requests that fit at full length."""
    check_positive_int("context_len", context_len)
    return max(0, int(pool_bytes // (context_len * cell_size)))


_TORCH_DTYPES = {"bf16": "torch.bfloat16", "bfloat16": "torch.bfloat16", "fp16": "torch.float16",
                 "float16": "torch.float16", "half": "torch.float16", "fp32": "torch.float32",
                 "float32": "torch.float32", "fp8_e4m3": "torch.float8_e4m3fn",
                 "fp8_e5m2": "torch.float8_e5m2"}


@dataclass(frozen=True)
class KVPoolPlan:
    """The KV pool SGLang would build, with everything its start-up log prints.

    Memory fields are bytes; ``*_gib`` properties give GiB as SGLang prints them ("GB").
    """

    model: str
    mem_fraction_static: float
    tp: int
    page_size: int
    kv_cache_dtype: str
    context_len: int
    pre_free_bytes: int
    post_free_bytes: int
    weights_bytes: int
    cell_size: int
    max_total_num_tokens: int
    req_to_token_pool_size: int
    max_running_requests: int
    k_size_bytes: int
    v_size_bytes: int
    is_mla: bool
    sglang_version: str = DEFAULT_SGLANG_VERSION
    kv_dtype_in_allocation_log: bool | None = None  # None: the named release's
    swa_pool_lines_labelled: bool | None = None  # None: the named release's
    architecture: str = ""
    chunked_prefill_size: int | None = None
    warnings: tuple[str, ...] = ()
    configurator: str = "DefaultPoolConfigurator"  # "" where the release has none (0.5.9)
    sizing_lines: tuple[str, ...] = ()  # the configurator's lines and warnings, in order
    swa_max_total_num_tokens: int | None = None
    swa_cell_size: int = 0
    sliding_window: int | None = None
    attention_chunk_window: int | None = None  # logged as the window (Llama 4); see log_lines
    mamba_slots: int = 0  # max_mamba_cache_size (the pool has one padding slot more)
    conv_state_bytes: int = 0  # one request's state slot, all linear layers
    ssm_state_bytes: int = 0
    server_args_lines: tuple[str, ...] = ()  # printed while SGLang sets its arguments (DSA)
    indexer_cell_size: int = 0  # DSA index-key bytes per token, all layers (in cell_size)
    # SGLang's warnings from outside the pool's own lines (a context longer than the model's)
    # and pagedkv's for a capacity planner (ignored flags, B_max 0, a whole-card estimate):
    # printed after the log lines and listed with ``warnings`` in ``as_dict``, but kept out
    # of ``pool_log_lines``, which the reference tests hold to SGLang's configurator.
    notes: tuple[str, ...] = ()
    # The dtype SGLang loads the model in: float16 below compute capability 8.0 (T4).
    model_dtype: str = "torch.bfloat16"

    @property
    def is_swa(self) -> bool:
        """A full pool plus a sliding-window pool."""
        return self.swa_max_total_num_tokens is not None

    @property
    def state_bytes(self) -> int:
        """Bytes of one request's state slot (linear-attention hybrids; 0 otherwise)."""
        return self.conv_state_bytes + self.ssm_state_bytes

    @property
    def pool_bytes(self) -> int:
        """Bytes of KV and state the pools hold, padding pages and slots left out:
        ``max_total_num_tokens * cell_size`` (+ SWA tokens * their bytes, + state slots)."""
        swa = (self.swa_max_total_num_tokens or 0) * self.swa_cell_size
        return self.max_total_num_tokens * self.cell_size + swa + self.mamba_slots * self.state_bytes

    @property
    def longest_prompt(self) -> int:
        """The longest prompt SGLang accepts on this pool: ``max_req_input_len - 1``."""
        return max_req_input_len(self.max_total_num_tokens, self.context_len) - 1

    @property
    def batch_cap(self) -> int:
        """``B_max``: requests that fit if each grows to ``context_len`` tokens. A
        sliding-window request holds at most ``min(context, window + 1)`` SWA tokens; a
        linear-attention request one state slot, and with the radix cache SGLang 0.5.23 counts
        more per running request (``resolve_max_num_reqs``: 3, plus the track slots of its
        default ``extra_buffer`` strategy), so a linear-attention
        hybrid's ``B_max`` is at most the ``max_running_requests`` those slots allow."""
        cap = batch_cap(self.max_total_num_tokens * self.cell_size, self.context_len,
                        self.cell_size)
        if self.is_swa and self.sliding_window is not None:
            cap = min(cap, self.swa_max_total_num_tokens
                      // min(self.context_len, self.sliding_window + 1))
        if self.mamba_slots:
            cap = min(cap, self.max_running_requests)
        return cap

    def log_lines(self) -> list[str]:
        """SGLang's start-up lines for this pool, in ``sglang_version``'s words.

        "GB" in them means GiB, as SGLang divides by 2^30. What pagedkv cannot know is left
        out of the lines: the load's ``elapsed=`` time and quantization, and the free memory
        left after CUDA-graph capture (``available_gpu_mem=``); ``chunked_prefill_size=`` is
        printed when the user or a GPU preset gave it (the user's, -1 included, as SGLang
        prints ``server_args.chunked_prefill_size``). Below compute capability 8.0 (T4) the
        model is loaded as float16 and both releases say so. Sources (both releases):
        ``model_executor/model_runner.py`` ``ModelRunner.load_model``,
        ``mem_cache/memory_pool.py`` ``_finalize_allocation_log``, ``managers/scheduler.py``
        ``Scheduler.__init__`` (0.5.23 adds ``dtype:`` to the allocation line and drops it
        from the load line); a model whose window is its ``attention_chunk_size`` (Llama 4)
        says so before "Load weight end" (:func:`pagedkv.configs.model_hybrid.window_from_attention_chunk`).
        """
        pre, post = self.pre_free_bytes / GiB, self.post_free_bytes / GiB
        model = f"type={self.architecture}, " if self.architecture else ""
        if self._dtype_in_allocation_log:
            load_end = f"Load weight end. {model}"
        else:
            load_end = f"Load weight end. {model}dtype={self.model_dtype}, "
        # Both releases say so right after "Load weight begin" on a card without bfloat16.
        downcast = (["Compute capability below sm80. Use float16 due to lack of bfloat16 "
                     "support."] if self.model_dtype == "torch.float16" else [])
        chunk = ("" if self.chunked_prefill_size is None
                 else f"chunked_prefill_size={self.chunked_prefill_size}, ")
        return [
            *self.server_args_lines,
            f"Load weight begin. avail mem={pre:.2f} GB",
            *downcast,
            *([] if self.attention_chunk_window is None else [
                "Setting sliding_window_size to be attention_chunk_size: "
                f"{self.attention_chunk_window}"]),
            f"{load_end}avail mem={post:.2f} GB, mem usage={pre - post:.2f} GB.",
            *self.pool_log_lines(),
            f"max_total_num_tokens={self.max_total_num_tokens}, {chunk}"
            f"max_prefill_tokens=16384, max_running_requests={self.max_running_requests}, "
            f"context_len={self.context_len}",
        ]

    def pool_log_lines(self) -> list[str]:
        """The lines of :meth:`log_lines` between "Load weight end" and the closing
        ``max_total_num_tokens=...`` line: what the configurator and the pools print (what the
        reference tests compare with SGLang's own sizing, which loads no model)."""
        kv_dtype = _TORCH_DTYPES.get(self.kv_cache_dtype, self.kv_cache_dtype)
        if kv_dtype == "torch.bfloat16":  # pagedkv's bf16 stands for SGLang's "auto" KV dtype,
            kv_dtype = self.model_dtype   # the model's: float16 on a T4
        return [*(self.sizing_lines or self.warnings),
                *allocation_lines(self, kv_dtype if self._dtype_in_allocation_log else None)]

    @property
    def _dtype_in_allocation_log(self) -> bool:
        """Whether the allocation line names the KV dtype (0.5.23) or the load line does (0.5.9)."""
        if self.kv_dtype_in_allocation_log is not None:
            return self.kv_dtype_in_allocation_log
        return as_release(self.sglang_version).kv_dtype_in_allocation_log

    def as_dict(self) -> dict[str, object]:
        """A flat JSON-able summary (what ``pagedkv size --json`` prints): memory as exact
        bytes (``*_bytes``) and as GiB (2^30 bytes) rounded to 6 decimals (``*_gib``: a
        reading of 78.81 GiB stays 78.81, not its float remainder), and SGLang's warnings."""
        memory = {"pre_free": self.pre_free_bytes, "post_free": self.post_free_bytes,
                  "weights": self.weights_bytes, "pool": self.pool_bytes}
        if self.is_mla:
            memory["kv_size"] = self.k_size_bytes
        else:
            memory.update(k_size=self.k_size_bytes, v_size=self.v_size_bytes)
        out: dict[str, object] = {
            "model": self.model,
            "bytes_per_token": self.cell_size,
            "max_total_num_tokens": self.max_total_num_tokens,
            "max_running_requests": self.max_running_requests,
            "req_to_token_pool_size": self.req_to_token_pool_size,
            "mem_fraction_static": self.mem_fraction_static,
            "tp": self.tp,
            "page_size": self.page_size,
            "kv_cache_dtype": self.kv_cache_dtype,
            "context_len": self.context_len,
            "batch_cap": self.batch_cap,
            "sglang_version": self.sglang_version,
            "warnings": [*self.warnings, *self.notes],
            "configurator": self.configurator,
        }
        if self.is_swa:
            out.update(swa_max_total_num_tokens=self.swa_max_total_num_tokens,
                       swa_bytes_per_token=self.swa_cell_size, sliding_window=self.sliding_window)
        if self.indexer_cell_size:
            out.update(indexer_bytes_per_token=self.indexer_cell_size)
        if self.mamba_slots:
            out.update(max_mamba_cache_size=self.mamba_slots,
                       state_bytes_per_request=self.state_bytes)
        for name, size in memory.items():
            out[f"{name}_bytes"] = int(size)
            out[f"{name}_gib"] = round(size / GiB, 6)
        return out


# The lines SGLang's pools print when they are allocated. Each per-layer buffer holds one
# padding page more than the pool's tokens (``size + page_size`` rows), and "GB" is GiB
# (bytes / 2^30). Sources (0.5.23): ``mem_cache/memory_pool.py`` ``_finalize_allocation_log``
# (one pool, and each of the two pools of a sliding-window hybrid, named "Full" and "SWA"),
# ``mem_cache/swa_memory_pool.py`` ``SWAKVPool.__init__`` (their sum; 0.5.9 builds the window
# pool first and its pools print no "Full "/"SWA " label: ``Release.swa_pool_lines_labelled``),
# ``mem_cache/memory_pool.py`` ``MambaPool.__init__`` (the state slots, plus one padding slot;
# the line ends with a space).


def _kv_line(label: str, dtype: str | None, tokens: int, k: int, v: int | None) -> str:
    head = f"{label}KV Cache is allocated. " + (f"dtype: {dtype}, " if dtype else "")
    size = (f"KV size: {k / GiB:.2f} GB" if v is None
            else f"K size: {k / GiB:.2f} GB, V size: {v / GiB:.2f} GB")
    return f"{head}#tokens: {tokens}, {size}"


def allocation_lines(plan: KVPoolPlan, dtype: str | None) -> list[str]:
    """SGLang's allocation lines for ``plan``'s pools; ``dtype`` (``"torch.bfloat16"``) is
    printed when the release prints it, None otherwise."""
    v = None if plan.is_mla else plan.v_size_bytes
    if plan.is_swa:
        rows = plan.swa_max_total_num_tokens + plan.page_size
        half = rows * plan.swa_cell_size // 2  # K and V of every window layer
        total = plan.k_size_bytes + plan.v_size_bytes + 2 * half
        full = _kv_line("Full ", dtype, plan.max_total_num_tokens, plan.k_size_bytes, v)
        window = _kv_line("SWA ", dtype, plan.swa_max_total_num_tokens, half, half)
        labelled = plan.swa_pool_lines_labelled
        if labelled is None:
            labelled = as_release(plan.sglang_version).swa_pool_lines_labelled
        if not labelled:  # 0.5.9
            full, window = window[4:], full[5:]  # unlabelled, the window pool's line first
        return [
            full, window,
            f"SWAKVPool mem usage: {total / GiB:.2f} GB, swa size: "
            f"{plan.swa_max_total_num_tokens}, full size: {plan.max_total_num_tokens}",
        ]
    lines = []
    if plan.mamba_slots:
        slots = plan.mamba_slots + 1
        lines.append(f"Mamba Cache is allocated. max_mamba_cache_size: {plan.mamba_slots}, "
                     f"conv_state size: {slots * plan.conv_state_bytes / GiB:.2f}GB, "
                     f"ssm_state size: {slots * plan.ssm_state_bytes / GiB:.2f}GB ")
    lines.append(_kv_line("", dtype, plan.max_total_num_tokens, plan.k_size_bytes, v))
    return lines
