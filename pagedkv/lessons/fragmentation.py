"""How much of the KV pool holds real token states: contiguous reservation vs paging.

The measure (ours, modelled on the vLLM paper's Fig. 2, Kwon et al., SOSP 2023): replay a
workload through the real allocators and, at every decode step while a request is waiting
for memory (the pool is the bottleneck), split the pool into

- ``tokens``: slots holding a token's K/V;
- ``held_ahead``: slots already held for tokens the request will still generate (filled
  later): the rest of a contiguous run, or the unfilled tail of the last page up to the
  request's final length. Not admission's *reserved* of chapter 1, which holds no slot;
- ``internal``: held but never filled (reservation beyond the true length; the unused
  tail of the last page);
- ``external``: free, yet the waiting request cannot use it (no contiguous run);
- ``free``: free and usable, just too little for the waiting request.

The five shares are averaged over those steps and sum to 1.

Replay rules (a simplification of SGLang's scheduler, which ``pagedkv.managers`` models):
all requests queue at t=0 in order (``arrival_s`` is ignored); each step admits from the
head while the next one fits, stores its prompt, then every running request gains one token;
a request whose length reaches ``prompt_len + output_len`` finishes and frees its memory.
Contiguous schemes reserve one run at admission, sized as the paper's three Orca baselines
(:func:`pagedkv.lessons.contiguous.orca_reservation`, section 6.1): the model's maximum
sequence length (``"max"``), the prompt plus the output rounded up to a power of two
(``"pow2"``), or the prompt plus the true output (``"oracle"``). Paged schemes
allocate pages as tokens arrive; when a decode step runs out of pages, SGLang's
``retract_decode`` order (fewest output tokens first, then longest prompt) frees requests
and requeues them at the head. The replay stops when the queue empties.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from pagedkv.errors import bad_value, check_positive_int
from pagedkv.lessons.contiguous import (
    ORCA_MAX_SEQ_LEN,
    ORCA_SCHEMES,
    ContiguousAllocator,
    Fit,
    orca_reservation,
)
from pagedkv.mem_cache.allocator import PagedTokenToKVPoolAllocator, TokenToKVPoolAllocator
from pagedkv.workloads.synthetic import RequestSpec, sharegpt_like

CATEGORIES = ("tokens", "held_ahead", "internal", "external", "free")
SCHEME_LABELS = {"max": "Orca (Max)", "pow2": "Orca (Pow2)", "oracle": "Orca (Oracle)"}
# vLLM paper (Kwon et al., SOSP 2023), Fig. 2: percent of KV-cache memory holding token states
# in the experiment of section 6.2, per system.
VLLM_FIG2_TOKEN_STATES = {"max": 20.4, "pow2": 26.8, "oracle": 38.2, "vllm": 96.3}

# Chapters 2 and 3 measure one workload on one pool (see :func:`fragmentation_workload`).
FRAGMENTATION_REQUESTS = 200
FRAGMENTATION_POOL = 16_384
FRAGMENTATION_MAX_LEN = 1024  # prompt and output each: every request fits ORCA_MAX_SEQ_LEN
_NO_CLIP = 2**31 - 1  # a clip no log-normal draw of the fit's size reaches


def fragmentation_workload(seed: int = 0) -> list[RequestSpec]:
    """The workload chapters 2 and 3 measure: :data:`FRAGMENTATION_REQUESTS` ShareGPT-like
    requests (:func:`pagedkv.workloads.synthetic.sharegpt_like`), prompts and outputs each
    clipped to :data:`FRAGMENTATION_MAX_LEN` tokens, so that every request fits the 2,048-token
    maximum sequence length that Orca (Max) reserves; all arrive at t = 0."""
    return sharegpt_like(FRAGMENTATION_REQUESTS, max_new_tokens=FRAGMENTATION_MAX_LEN,
                         max_prompt_len=FRAGMENTATION_MAX_LEN, seed=seed)


@dataclass(frozen=True)
class ClippedMeans:
    """Mean lengths (tokens) of :func:`fragmentation_workload`'s requests before and after the
    clip, and how many lengths the clip cut."""

    drawn_prompt: float
    drawn_output: float
    prompt: float
    output: float
    prompts_clipped: int
    outputs_clipped: int


def clipped_means(seed: int = 0) -> ClippedMeans:
    """What the clip to :data:`FRAGMENTATION_MAX_LEN` does to :func:`fragmentation_workload`:
    the same seed draws the same lengths whatever the clip (it is applied after the draw), so
    the unclipped draw differs from the chapter's workload by the clip alone. The drawn means
    differ from the fit's (``SHAREGPT_MEAN_*``) by sampling: a few hundred draws of a
    long-tailed distribution."""
    unclipped = sharegpt_like(FRAGMENTATION_REQUESTS, max_new_tokens=_NO_CLIP,
                              max_prompt_len=_NO_CLIP, seed=seed)
    clipped = fragmentation_workload(seed)
    return ClippedMeans(
        float(np.mean([s.prompt_len for s in unclipped])),
        float(np.mean([s.output_len for s in unclipped])),
        float(np.mean([s.prompt_len for s in clipped])),
        float(np.mean([s.output_len for s in clipped])),
        sum(s.prompt_len > FRAGMENTATION_MAX_LEN for s in unclipped),
        sum(s.output_len > FRAGMENTATION_MAX_LEN for s in unclipped))


def scheme_label(scheme: str) -> str:
    """How the book names a scheme: ``"pow2"`` -> ``"Orca (Pow2)"``, ``"page=16"`` -> ``"page=16"``."""
    return SCHEME_LABELS.get(scheme, scheme)


@dataclass(frozen=True)
class MemoryShare:
    """Average shares of the pool (each in [0, 1], summing to 1) for one scheme."""

    scheme: str
    tokens: float
    held_ahead: float
    internal: float
    external: float
    free: float
    steps: int  # decode steps sampled (a request was waiting)

    @property
    def label(self) -> str:
        """The scheme as the book names it (:func:`scheme_label`)."""
        return scheme_label(self.scheme)


class _Contiguous:
    """Reserve one run per request (an Orca scheme); growth never allocates."""

    def __init__(self, size: int, scheme: str, max_seq_len: int) -> None:
        self.mem, self.scheme, self.max_seq_len = ContiguousAllocator(size), scheme, max_seq_len

    def reserve_len(self, spec: RequestSpec) -> int:
        return orca_reservation(self.scheme, spec.prompt_len, spec.output_len, self.max_seq_len)

    def admit(self, i: int, spec: RequestSpec, length: int) -> bool:
        return self.mem.alloc(str(i), self.reserve_len(spec), used=length) is not None

    def decode(self, running: list[int], lens: dict[int, int]) -> list[int]:
        return []  # the reservation already covers every token

    def held(self, i: int, length: int) -> int:
        return self.mem.runs[str(i)].reserved

    def finish(self, i: int, length: int) -> None:
        self.mem.free(str(i))

    def external(self, spec: RequestSpec) -> int:
        blocked = self.mem.fit(self.reserve_len(spec)) is Fit.NO_CONTIGUOUS_RUN
        return self.mem.free_slots() if blocked else 0


class _Paged:
    """Pages through the real allocator; a page table row per request."""

    def __init__(self, size: int, page_size: int, rows: int, max_len: int) -> None:
        self.p = page_size
        self.mem = (TokenToKVPoolAllocator(size) if page_size == 1
                    else PagedTokenToKVPoolAllocator(size, page_size))
        self.table = torch.zeros((rows, max_len), dtype=torch.int64)

    def admit(self, i: int, spec: RequestSpec, length: int) -> bool:
        out = self.mem.alloc_extend([0], [length], [-1], length)
        if out is not None:
            self.table[i, :length] = out
        return out is not None

    def decode(self, running: list[int], lens: dict[int, int]) -> list[int]:
        """Allocate one slot per running request; return the requests to retract first."""
        if not running:
            return []
        rows = torch.tensor(running)
        seq = torch.tensor([lens[i] + 1 for i in running])
        out = self.mem.alloc_decode(seq, self.table[rows, seq - 2])
        if out is None:
            return running
        self.table[rows, seq - 1] = out
        return []

    def held(self, i: int, length: int) -> int:
        return math.ceil(length / self.p) * self.p

    def finish(self, i: int, length: int) -> None:
        self.mem.free(self.table[i, :length])

    def external(self, spec: RequestSpec) -> int:
        return 0  # any free page serves any request


def measure(specs: list[RequestSpec], pool_tokens: int, scheme: str,
            max_seq_len: int = ORCA_MAX_SEQ_LEN) -> MemoryShare:
    """Replay ``specs`` on a pool of ``pool_tokens`` slots under ``scheme``.

    ``scheme`` is an Orca baseline of the vLLM paper, section 6.1 (contiguous runs sized by
    :func:`~pagedkv.lessons.contiguous.orca_reservation`): ``"max"`` (``max_seq_len``
    slots), ``"pow2"`` (prompt + output rounded up to a power of two) or ``"oracle"`` (prompt +
    true output); or ``"page=P"`` (the paged allocator, page size P; ``pool_tokens`` must be a
    multiple of P). ``max_seq_len`` is the model's maximum sequence length (the paper's 2,048).

    Raises:
        ConfigError: an unknown scheme, a request longer than ``max_seq_len`` under an Orca
            scheme, or a pool smaller than the longest reservation.
    """
    check_positive_int("pool_tokens", pool_tokens)
    max_len = max(s.prompt_len + max(s.max_new_tokens, s.output_len) for s in specs)
    if scheme in ORCA_SCHEMES:
        mem: _Contiguous | _Paged = _Contiguous(pool_tokens, scheme, max_seq_len)
        longest = max(mem.reserve_len(s) for s in specs)
    elif scheme.startswith("page="):
        mem = _Paged(pool_tokens, int(scheme[5:]), len(specs), max_len)
        longest = max(math.ceil((s.prompt_len + s.output_len) / mem.p) * mem.p for s in specs)
    else:
        raise bad_value("scheme", scheme, '"max", "pow2", "oracle" or "page=P"')
    if longest > pool_tokens:
        raise bad_value("pool_tokens", pool_tokens, f">= {longest}, the longest request")
    queue, running = list(range(len(specs))), []
    lens, done = dict.fromkeys(range(len(specs)), 0), {}
    totals, steps = np.zeros(len(CATEGORIES)), 0
    while queue:
        while queue:  # admit from the head while the next request fits
            i = queue[0]
            length = specs[i].prompt_len + done.get(i, 0)
            if not mem.admit(i, specs[i], length):
                break
            lens[i] = length
            running.append(queue.pop(0))
        if queue:
            totals += _split(mem, specs, running, lens, queue[0], pool_tokens)
            steps += 1
        while mem.decode(running, lens):  # out of pages: retract, as retract_decode does
            victim = min(running, key=lambda j: (lens[j] - specs[j].prompt_len,
                                                 -specs[j].prompt_len))
            running.remove(victim)
            mem.finish(victim, lens[victim])
            done[victim] = lens[victim] - specs[victim].prompt_len
            queue.insert(0, victim)
        for i in list(running):
            lens[i] += 1
            if lens[i] == specs[i].prompt_len + specs[i].output_len:
                running.remove(i)
                mem.finish(i, lens[i])
    return MemoryShare(scheme, *map(float, totals / max(steps, 1)), steps=steps)


def _split(mem: _Contiguous | _Paged, specs: list[RequestSpec], running: list[int],
           lens: dict[int, int], head: int, pool: int) -> np.ndarray:
    """The five shares of the pool right now (see the module docstring)."""
    tokens = held_ahead = internal = 0
    for i in running:
        final = specs[i].prompt_len + specs[i].output_len
        held = mem.held(i, lens[i])
        tokens += lens[i]
        internal += max(0, held - final)
        held_ahead += held - lens[i] - max(0, held - final)
    held_total = tokens + held_ahead + internal
    external = mem.external(specs[head])
    return np.array([tokens, held_ahead, internal, external,
                     pool - held_total - external]) / pool


def compare(specs: list[RequestSpec], pool_tokens: int,
            page_sizes: tuple[int, ...] = (1, 16, 64, 256),
            max_seq_len: int = ORCA_MAX_SEQ_LEN) -> list[MemoryShare]:
    """:func:`measure` for ``max``, ``pow2``, ``oracle`` and each page size, in that order."""
    schemes = [*ORCA_SCHEMES, *(f"page={p}" for p in page_sizes)]
    return [measure(specs, pool_tokens, s, max_seq_len) for s in schemes]


@dataclass(frozen=True)
class PageSizeCost:
    """Requests held at their final lengths under one page size."""

    page_size: int
    tokens: int  # token states stored
    held_slots: int  # slots taken from the free list (whole pages)
    pages: int  # page-table entries a page-granular table needs (as SGLang hands FA3)

    @property
    def wasted_pct(self) -> float:
        """Empty slots in last pages, as % of held slots (internal fragmentation)."""
        return 100.0 * (self.held_slots - self.tokens) / self.held_slots


def page_size_costs(specs: list[RequestSpec], page_sizes: tuple[int, ...]) -> list[PageSizeCost]:
    """Allocate every request at ``prompt_len + output_len`` through the real allocator
    (one ``alloc_extend`` batch per page size) and read back what was taken."""
    lens = torch.tensor([s.prompt_len + s.output_len for s in specs])
    costs = []
    for p in page_sizes:
        size = int(((lens + p - 1) // p).sum()) * check_positive_int("page_size", p)
        mem = (TokenToKVPoolAllocator(size) if p == 1
               else PagedTokenToKVPoolAllocator(size, p))
        mem.alloc_extend(torch.zeros_like(lens), lens, torch.full_like(lens, -1),
                         int(lens.sum()), strict=True)
        held = mem.size - mem.available_size()
        costs.append(PageSizeCost(p, mem.used_slots(), held, held // p))
    return costs
