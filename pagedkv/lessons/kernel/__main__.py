"""``python -m pagedkv.lessons.kernel``: check the kernel against the reference, report GB/s."""

from __future__ import annotations

import time

import torch

from pagedkv.layers.attention import paged_decode_attention, paged_decode_attention_ref
from pagedkv.layers.attention.checks import interpreted
from pagedkv.lessons.kernel import decode_bytes, random_decode_case


def demo() -> None:
    """Check one batch against the reference and print the achieved bandwidth."""
    device = "cpu" if interpreted() else "cuda"
    lens = [1, 37, 100, 64]
    case = random_decode_case(lens, num_q_heads=8, num_kv_heads=2, head_dim=64, page_size=16,
                              device=device)
    o = paged_decode_attention(*case.slot_args())
    err = (o - paged_decode_attention_ref(*case.slot_args())).abs().max().item()
    print(f"max |kernel - reference| = {err:.2e} (fp32, page_size {case.page_size})")
    if interpreted():
        print("CPU interpreter: timings measure Python, not memory bandwidth; run on a GPU.")
        return
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(100):
        paged_decode_attention(*case.slot_args())
    torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / 100
    gbps = decode_bytes(case.seq_lens, 8, 2, 64, 4) / seconds / 1e9
    print(f"{seconds * 1e6:.1f} us per call, {gbps:.1f} GB/s (tiny shapes; see bench/)")


demo()
