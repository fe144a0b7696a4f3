"""Whole-loop cases: a workload and a server, as plain data, for SGLang's event loop and
pagedkv's scheduler to run side by side (:mod:`loop_sglang`, :mod:`loop_pagedkv`).

A case is a pool (page size, tokens), the scheduler's settings (radix cache on or off, chunked
prefill size, request cap, ``max_prefill_tokens``, ``schedule_conservativeness``) and requests:
prompt token ids, ``max_new_tokens``, ignore-EOS, an arrival time, and the output tokens the
model will produce. Both sides get their next token from the same table: the token at output
index ``k`` of request ``r`` is ``outputs[r][k]`` (:func:`next_token`), and a request that does
not ignore EOS stops at its first :data:`EOS` (or at ``max_new_tokens``), so the two runs see
the same tokens whatever order they compute them in.

Time is counted in forward passes: each pass takes one unit; a request arriving at ``t`` joins
the waiting queue at the first step that starts when ``t`` passes have run, and an idle server
with nothing waiting jumps to the next arrival (what pagedkv's clock does; the SGLang driver
feeds its receiver by the same rule).

:func:`random_case` draws cases that exercise the loop: arrivals over time, shared prompt
prefixes (the radix cache matches them, and the outputs that follow), chunked prefill, page
sizes 1 and 16, EOS at random lengths, ignore-EOS requests, and pools small enough, with a
``schedule_conservativeness`` low enough, that admission over-commits and decode retracts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

EOS = 2  # the model's end-of-sequence token id
VOCAB = 32000


@dataclass(frozen=True)
class LoopRequest:
    """One request: ``outputs[k]`` is the token it produces at output index ``k``."""

    arrival: int
    prompt: tuple[int, ...]
    max_new_tokens: int
    outputs: tuple[int, ...]
    ignore_eos: bool = False

    @property
    def eos_len(self) -> int | None:
        """The output length at which EOS stops it (None: it never samples EOS)."""
        return self.outputs.index(EOS) + 1 if EOS in self.outputs else None


@dataclass(frozen=True)
class LoopCase:
    """A server and a workload; request ``i`` is named ``i`` (SGLang: ``str(i)``).
    ``overlap``: SGLang's overlap loop (its default) instead of the normal one;
    ``disable_consecutive_prefill_overlap``: SGLang's environment variable of that name."""

    page_size: int
    pool_tokens: int
    requests: tuple[LoopRequest, ...]
    radix: bool = True
    chunked_prefill_size: int | None = None
    max_running_requests: int = 8
    max_prefill_tokens: int = 16384
    schedule_conservativeness: float = 1.0
    context_len: int = 4096
    overlap: bool = False
    disable_consecutive_prefill_overlap: bool = False
    # a sliding-window hybrid (:mod:`drive_loop_swa`): the window, the SWA pool's tokens
    # (``pool_tokens`` is then the full pool's) and ``SGLANG_SWA_EVICTION_INTERVAL``
    sliding_window_size: int | None = None
    swa_pool_tokens: int | None = None
    swa_eviction_interval: int = 128
    # a linear-attention hybrid (:mod:`drive_loop_mamba`): its state slots, SGLang's
    # ``max_mamba_cache_size`` (``max_running_requests`` is then already capped by them)
    mamba_slots: int | None = None


def next_token(case: LoopCase, rid: int, index: int) -> int:
    """The token request ``rid`` samples at output index ``index`` (a cut chunk's throwaway
    sample has a negative index)."""
    outputs = case.requests[rid].outputs
    return outputs[index] if 0 <= index < len(outputs) else 7


def max_req_len(case: LoopCase) -> int:
    """SGLang's ``max_req_len``: ``min(context_len - 1, max_total_num_tokens - 1)``
    (``TpModelWorker``); prompts must be shorter than ``max_req_len - 5``."""
    return min(case.context_len - 1, case.pool_tokens - 1)


def _ceil(n: int, p: int) -> int:
    return -(-n // p) * p


def random_case(seed: int, overlap: bool = False, radix: bool | None = None) -> LoopCase:
    """A random case (see the module docstring); the same seed gives the same case.
    ``radix``: the radix cache on or off whatever the seed draws (None: as drawn; the draw
    is made either way, so the rest of the case is the seed's)."""
    rng = np.random.default_rng(seed)
    p = int(rng.choice((1, 16)))
    drawn = bool(rng.random() < 0.7)
    radix = drawn if radix is None else radix
    n = int(rng.integers(2, 8))
    longest_prompt = 40 if p == 1 else 80
    stems = [tuple(int(t) for t in rng.integers(10, VOCAB, int(rng.integers(1, longest_prompt))))
             for _ in range(3)]
    reqs_raw = []
    arrival = 0
    for _ in range(n):
        if rng.random() < 0.6:
            arrival += int(rng.integers(1, 4))
        stem = stems[int(rng.integers(0, 3))] if rng.random() < 0.6 else ()
        cut = int(rng.integers(0, len(stem) + 1))
        tail = tuple(int(t) for t in rng.integers(10, VOCAB, int(rng.integers(0, longest_prompt))))
        prompt = (stem[:cut] + tail) or (int(rng.integers(10, VOCAB)),)
        max_new = int(rng.integers(1, 60 if p == 1 else 100))
        outputs = [int(t) for t in rng.integers(10, VOCAB, max_new)]
        if rng.random() < 0.4:  # EOS somewhere (an ignore-EOS request samples it and goes on)
            outputs[int(rng.integers(max_new // 3, max_new))] = EOS
        if rng.random() < 0.2 and reqs_raw:  # the same prompt and answer as an earlier request
            prompt, outputs = reqs_raw[-1][1], list(reqs_raw[-1][3][:max_new])
            outputs += [11] * (max_new - len(outputs))
        reqs_raw.append([arrival, prompt, max_new, outputs, bool(rng.random() < 0.3)])
    demand = sum(_ceil(len(r[1]) + r[2], p) for r in reqs_raw)
    biggest = max(_ceil(len(r[1]), p) for r in reqs_raw)
    pool = _ceil(max(int(demand * rng.uniform(0.1, 0.4)), biggest + 8 * p), p)
    pool = max(pool, _ceil(biggest + 6 + p, p) + p)
    chunk = None if rng.random() < 0.4 else int(rng.choice((8, 16, 24, 32, 64) if p == 1
                                                            else (16, 32, 48, 64)))
    case = LoopCase(
        page_size=p, pool_tokens=pool, requests=(), radix=radix, chunked_prefill_size=chunk,
        max_running_requests=int(rng.choice((3, 4, 8, 16))),
        max_prefill_tokens=int(rng.choice((16384, 48, 96))) if chunk is None else 16384,
        schedule_conservativeness=float(rng.choice((1.0, 0.3, 0.1, 0.1))),
        context_len=int(rng.choice((4096, 128))), overlap=overlap)
    limit = max_req_len(case) - 5
    reqs = []
    for arrival, prompt, max_new, outputs, ignore_eos in reqs_raw:
        prompt = prompt[:limit - 1]
        # SGLang's clamp at arrival (0.5.23): what the pool could ever hold
        cap = min(max_req_len(case) - len(prompt) - 1,
                  pool - _ceil(len(prompt), p) - p - 1)
        if ignore_eos and not radix and pool - _ceil(len(prompt), p) - p - min(max_new, cap) <= 1:
            ignore_eos = False  # admission would never take it (SGLang waits forever)
        reqs.append(LoopRequest(arrival, prompt, max_new, tuple(outputs), ignore_eos))
    return LoopCase(**{**case.__dict__, "requests": tuple(reqs)})
