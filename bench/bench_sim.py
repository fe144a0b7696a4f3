"""Simulator speed: request-steps per second of wall time on one CPU core.

A request-step is one request taking part in one step (one sampled token, or one chunk of a
chunked prefill). Workload: 10,000 ShareGPT-like requests (``pagedkv.workloads.synthetic.
sharegpt_like``, seed 0, all arriving at t=0) on the pool SGLang builds for Llama-3-8B on one
H100 SXM 80GB, in two modes: SGLang's default server (the radix cache on) with a 500-token
system prompt in front of every prompt, and ``--disable-radix-cache`` without it.
Target: >= 1,000,000 request-steps/s in both, per second of the process's own CPU time (one
thread: torch is held to one); wall time is printed too, but on a shared machine it also
counts the time the process waited for its core. Run: ``python bench/bench_sim.py [--requests N]
[--page-size P] [--repeats R] [--mode radix|plain|both]``; with ``R > 1`` the verdict uses
the median run. The load average is printed too: on a shared machine, compare runs taken
under similar load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from pagedkv.entrypoints import simulate
from pagedkv.workloads.prefix import with_system_prompt
from pagedkv.workloads.synthetic import sharegpt_like

SYSTEM_PROMPT = 500  # tokens shared by every request in the radix mode

TARGET = 1_000_000


def main() -> None:
    """Run the workload ``--repeats`` times, print what was measured."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--policy", default="sglang")
    parser.add_argument("--page-size", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--mode", choices=("radix", "plain", "both"), default="both")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error(f"--repeats {args.repeats}: must be >= 1")
    torch.set_num_threads(1)
    plain = sharegpt_like(args.requests, seed=0)
    modes = {"radix": (True, with_system_prompt(plain, SYSTEM_PROMPT, seed=0)),
             "plain": (False, plain)}
    for mode in (("radix", "plain") if args.mode == "both" else (args.mode,)):
        radix, specs = modes[mode]
        rates, cpu_rates = [], []
        for _ in range(args.repeats):
            start, cpu_start = time.perf_counter(), time.process_time()
            res = simulate(specs, model="llama-3-8b", gpu="h100-sxm-80gb", policy=args.policy,
                           page_size=args.page_size, radix_cache=radix)
            wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
            rates.append(res.metrics.request_steps / wall)
            cpu_rates.append(res.metrics.request_steps / cpu)
            print(f"[{mode}] wall {wall:.2f} s: {rates[-1]:,.0f} request-steps/s; CPU {cpu:.2f} s: "
                  f"{cpu_rates[-1]:,.0f} per CPU second")
        m, rate, cpu_rate = res.metrics, statistics.median(rates), statistics.median(cpu_rates)
        hit = sum(r.cached_tokens for r in res.requests)
        print(f"[{mode}] radix cache {'on' if radix else 'off'}: pool {res.plan.max_total_num_tokens} "
              f"tokens, max_running_requests {res.plan.max_running_requests}, page_size "
              f"{args.page_size}, policy {args.policy}, prompt tokens served from the tree {hit:,}")
        print(f"[{mode}] {m.num_requests} requests, {m.num_steps} steps ({m.num_prefill_steps} "
              f"prefill, {m.num_decode_steps} decode), {m.request_steps} request-steps, "
              f"{m.num_retractions} retractions")
        print(f"[{mode}] median of {len(rates)} on one core: {rate:,.0f} request-steps/s of wall "
              f"time, {cpu_rate:,.0f} per second of the process's own CPU time "
              f"({'meets' if cpu_rate >= TARGET else 'below'} the {TARGET:,} target); load "
              f"average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
