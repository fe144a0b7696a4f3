"""Decode-step allocation speed: ``alloc_decode`` calls per second over batch sizes 1..4096.

Run: ``python bench/bench_allocator.py``. Each batch first prefills ``PROMPT`` tokens per
request, then times ``STEPS`` decode steps (one ``alloc_decode`` per step for the whole batch,
the last-slot bookkeeping included, as a scheduler would do it). Prints one row per
(page size, batch size): steps/s and slots allocated per second. CPU torch; SGLang runs the
same arithmetic as a Triton kernel on the GPU, so these numbers describe pagedkv, not SGLang.
"""

from __future__ import annotations

import time

import torch

from pagedkv.mem_cache.allocator import PagedTokenToKVPoolAllocator, TokenToKVPoolAllocator

PROMPT, STEPS = 100, 50
BATCHES = (1, 4, 16, 64, 256, 1024, 4096)
PAGE_SIZES = (1, 16, 64)


def steps_per_second(page_size: int, batch: int) -> float:
    """Time ``STEPS`` decode steps of ``batch`` requests; return steps per second."""
    pages = batch * ((PROMPT + STEPS) // page_size + 2)
    alloc = (TokenToKVPoolAllocator(pages) if page_size == 1
             else PagedTokenToKVPoolAllocator(pages * page_size, page_size))
    seq = torch.full((batch,), PROMPT, dtype=torch.int64)
    out = alloc.alloc_extend(torch.zeros_like(seq), seq, torch.full_like(seq, -1),
                             batch * PROMPT, strict=True)
    last = out[PROMPT - 1::PROMPT].clone()
    start = time.perf_counter()
    for _ in range(STEPS):
        seq += 1
        last = alloc.alloc_decode(seq, last, strict=True)
    elapsed = time.perf_counter() - start
    alloc.check_invariants()
    return STEPS / elapsed


def main() -> None:
    torch.set_num_threads(1)
    print(f"alloc_decode, {STEPS} steps after a {PROMPT}-token prefill, 1 CPU thread")
    print(f"{'page_size':>9s} {'batch':>6s} {'steps/s':>10s} {'slots/s':>12s} {'us/step':>9s}")
    for p in PAGE_SIZES:
        for b in BATCHES:
            rate = steps_per_second(p, b)
            print(f"{p:9d} {b:6d} {rate:10.0f} {rate * b:12.0f} {1e6 / rate:9.1f}")


if __name__ == "__main__":
    main()
