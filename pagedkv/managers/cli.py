"""``pagedkv simulate``: run the scheduler simulator from the command line.

``pagedkv.cli`` registers it with :func:`add_simulate_parser`; :func:`run_simulate` does the
work. Bad input raises :class:`~pagedkv.errors.ConfigError` naming the parameter, its value
and the valid range (the top-level CLI prints it and exits with status 2).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable

from pagedkv.errors import bad_value, check_positive_int
from pagedkv.gpus import GPU_PRESETS
from pagedkv.managers.config import Policy
from pagedkv.model import MODEL_PRESETS
from pagedkv.units import gib
from pagedkv.workloads.cases import LONG_ANSWERS
from pagedkv.workloads.prefix import as_specs, multi_turn, with_system_prompt
from pagedkv.workloads.synthetic import RequestSpec, fixed, sharegpt_like, uniform


def _long_workload(n: int, rate: float | None, seed: int) -> list[RequestSpec]:
    """The traffic of the book's running case (chapters 4, 5 and 7)."""
    return LONG_ANSWERS.workload(rate, seed, n)


def _system_prompt(n: int, rate: float | None, seed: int) -> list[RequestSpec]:
    """ShareGPT-like requests behind one 1,000-token system prompt."""
    return with_system_prompt(sharegpt_like(n, rate=rate, seed=seed), 1000, seed)


def _few_shot(n: int, rate: float | None, seed: int) -> list[RequestSpec]:
    """Short questions behind the same 2,000 tokens of worked examples, short answers."""
    return with_system_prompt(uniform(n, (20, 80), (5, 60), 64, rate=rate, seed=seed), 2000, seed)


def _chat(n: int, rate: float | None, seed: int) -> list[RequestSpec]:
    """Conversations of 4 turns after a 300-token system prompt; each turn resends the
    conversation so far and arrives when the turn before it has answered."""
    convs = max(1, -(-n // 4))
    reqs = multi_turn(convs, 4, (20, 200), (20, 400), system_len=300, seed=seed)[:n]
    return as_specs(reqs, max_new_tokens=512, rate=rate, seed=seed)


WORKLOADS: dict[str, Callable[[int, float | None, int], list[RequestSpec]]] = {
    "sharegpt": lambda n, rate, seed: sharegpt_like(n, rate=rate, seed=seed),
    "uniform": lambda n, rate, seed: uniform(n, (32, 1024), (32, 1024), 1024, rate=rate,
                                             seed=seed),
    "fixed": lambda n, rate, seed: fixed(n, 512, 256, rate=rate, seed=seed),
    "long": _long_workload,
    "system-prompt": _system_prompt,
    "few-shot": _few_shot,
    "chat": _chat,
}
"""Workloads by name: ShareGPT-like (max_new_tokens 2048), uniform 32-1024 prompt and output
tokens (max_new_tokens 1024), fixed 512-token prompts with 256-token outputs, long:
~386-token prompts with log-normal outputs (median 2,340, at most 10,540 tokens,
max_new_tokens = output), the traffic of the book's running case; and three with
shared prefixes for the radix cache: ShareGPT-like behind a 1,000-token system prompt,
few-shot (2,000 shared tokens, short questions and answers) and multi-turn chat."""


def add_simulate_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``pagedkv simulate`` on the top-level CLI's subparsers."""
    p = subparsers.add_parser(
        "simulate",
        help="simulate SGLang's scheduler (admission, new_token_ratio, retraction)",
        description="Size the pool SGLang would build for MODEL on GPU, then simulate its "
        "scheduler over a seeded workload and print the metrics. Times are a roofline model "
        "of the GPU (weights and KV read at peak bandwidth, prefill at peak FLOP/s), not "
        "measurements.",
    )
    p.add_argument("--model", default="llama-3-8b",
                   help=f"a preset ({', '.join(MODEL_PRESETS)}) or a config.json path "
                   "(default llama-3-8b)")
    p.add_argument("--gpu", default="h100-sxm-80gb",
                   help=f"GPU preset ({', '.join(GPU_PRESETS)}; default h100-sxm-80gb)")
    p.add_argument("--mem-fraction-static", type=float, metavar="F",
                   help="fraction in (0, 1] kept for weights + KV pool; default: SGLang's")
    p.add_argument("--page-size", type=int, default=1, help="tokens per KV page (default 1)")
    p.add_argument("--max-total-tokens", type=int, metavar="TOKENS",
                   help="cap on the pool in tokens (SGLang's --max-total-tokens)")
    p.add_argument("--tp", type=int, default=1, help="attention tensor-parallel size (default 1)")
    p.add_argument("--weights-gib", type=float, metavar="GIB",
                   help="weights per GPU in GiB, overriding the estimate (quantized models)")
    p.add_argument("--rate", type=float, metavar="REQ_PER_S",
                   help="Poisson arrival rate in requests/s (default: all arrive at t=0)")
    p.add_argument("--num-requests", type=int, default=1000, help="requests (default 1000)")
    p.add_argument("--workload", default="sharegpt",
                   help=f"request lengths: {', '.join(WORKLOADS)} (default sharegpt)")
    p.add_argument("--policy", default=Policy.SGLANG.value,
                   help=f"admission policy: {', '.join(x.value for x in Policy)} (default sglang)")
    p.add_argument("--disable-radix-cache", action="store_true",
                   help="turn SGLang's prefix cache off (it is on by default)")
    p.add_argument("--sglang-version", default="0.5.23", choices=("0.5.23", "0.5.9"),
                   help="the SGLang release whose scheduler is followed (default 0.5.23)")
    p.add_argument("--schedule-conservativeness", type=float, default=1.0, metavar="C",
                   help="scales the initial new_token_ratio, 0.7 x C capped at 1 (default 1.0)")
    p.add_argument("--seed", type=int, default=0, help="workload seed (default 0)")
    p.add_argument("--log", action="store_true",
                   help="print SGLang-format log lines (prefill, decode, retraction) first")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run_simulate)


def run_simulate(args: argparse.Namespace) -> int:
    """``pagedkv simulate``: build the workload, simulate, print metrics; return 0.

    Raises:
        ConfigError: unknown workload, policy, model or GPU; a count, rate or fraction out of
            range (the message names the parameter, the value and the valid range).
        NotEnoughMemoryError: the weights leave no room for a pool.
    """
    if args.workload not in WORKLOADS:
        raise bad_value("workload", args.workload, ", ".join(WORKLOADS))
    check_positive_int("num_requests", args.num_requests)
    if args.rate is not None and not args.rate > 0:
        raise bad_value("rate", args.rate, "requests per second > 0 (omit for all at t=0)")
    if not args.schedule_conservativeness > 0:
        raise bad_value("schedule_conservativeness", args.schedule_conservativeness, "a number > 0")
    if args.weights_gib is not None and args.weights_gib < 0:
        raise bad_value("--weights-gib", args.weights_gib, "GiB >= 0")
    # Imported here, not at the top: the simulator's pools import torch, which would add
    # about a second to every ``pagedkv`` start-up, ``pagedkv size`` included.
    from pagedkv.managers.simulation import simulate

    specs = WORKLOADS[args.workload](args.num_requests, args.rate, args.seed)
    res = simulate(specs, model=args.model, gpu=args.gpu,
                   mem_fraction_static=args.mem_fraction_static, page_size=args.page_size,
                   policy=args.policy, max_total_tokens=args.max_total_tokens, tp=args.tp,
                   weights_bytes=None if args.weights_gib is None else gib(args.weights_gib),
                   arrival_rate=args.rate, radix_cache=not args.disable_radix_cache,
                   sglang_version=args.sglang_version,
                   schedule_conservativeness=args.schedule_conservativeness)
    meta = res.trace.meta.to_dict()
    if args.json:
        out: dict[str, object] = {"meta": meta, "metrics": res.metrics.as_dict()}
        if args.log:
            out["log"] = res.trace.log
        print(json.dumps(out, indent=2))
        return 0
    if args.log:
        print("\n".join(res.trace.log))
    cache = "on" if meta["radix_cache"] else "off"
    print(f"{meta['model']} on {meta['gpu']}: pool {meta['max_total_num_tokens']:,} tokens "
          f"(page_size {meta['page_size']}, mem_fraction_static {meta['mem_fraction_static']}), "
          f"SGLang {meta['sglang_version']} scheduler, radix cache {cache}, policy "
          f"{meta['policy']}, {args.num_requests} {args.workload} requests")
    for key, value in res.metrics.as_dict().items():
        print(f"{key}: {value:,.4g}" if isinstance(value, float) else f"{key}: {value:,}")
    return 0
