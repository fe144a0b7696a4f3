"""Simulator speed: request-steps per second of wall time on one CPU core.

A request-step is one request taking part in one step (one sampled token, or one chunk of a
chunked prefill). Workload: 10,000 ShareGPT-like requests (``pagedkv.workload.sharegpt_like``,
seed 0, all arriving at t=0) on the pool SGLang builds for Llama-3-8B on one H100 SXM 80GB.
Target: >= 1,000,000 request-steps/s. Run: ``python bench/bench_sim.py [--requests N]``.
"""

from __future__ import annotations

import argparse
import time

import torch

from pagedkv.scheduler import simulate
from pagedkv.workload import sharegpt_like

TARGET = 1_000_000


def main() -> None:
    """Run the workload once, print what was measured."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--policy", default="sglang")
    parser.add_argument("--page-size", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(1)
    specs = sharegpt_like(args.requests, seed=0)
    start = time.perf_counter()
    res = simulate(specs, model="llama-3-8b", gpu="h100-sxm-80gb", policy=args.policy,
                   page_size=args.page_size)
    wall = time.perf_counter() - start
    m = res.metrics
    rate = m.request_steps / wall
    print(f"pool: {res.plan.max_total_num_tokens} tokens, max_running_requests "
          f"{res.plan.max_running_requests}, page_size {args.page_size}, policy {args.policy}")
    print(f"{m.num_requests} requests, {m.num_steps} steps ({m.num_prefill_steps} prefill, "
          f"{m.num_decode_steps} decode), {m.request_steps} request-steps, "
          f"{m.num_retractions} retractions")
    print(f"wall {wall:.2f} s on one core: {rate:,.0f} request-steps/s "
          f"({'meets' if rate >= TARGET else 'below'} the {TARGET:,} target)")


if __name__ == "__main__":
    main()
