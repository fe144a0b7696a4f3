"""``pagedkv generate``: serve prompts with a real model through the scheduler, print the
outputs and SGLang's log.

``pagedkv.cli`` registers it with :func:`add_generate_parser`; :func:`run_generate` does the
work. Torch and transformers are imported only when the command runs, so that ``pagedkv
size`` starts without them. Bad input raises :class:`~pagedkv.errors.ConfigError` (the
top-level CLI prints it and exits with status 2).

Examples::

    pagedkv generate                                   # the tiny random Llama, random prompts
    pagedkv generate --model Qwen/Qwen2.5-0.5B-Instruct --prompt "What is a KV cache?" --log
    pagedkv generate --model random:qwen2.5-0.5b --num-prompts 16 --max-total-tokens 4096
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from pagedkv.errors import bad_value, check_positive_int

CPU_POOL_TOKENS = 4096  # the CPU measures no free memory: the pool's default size there


def add_generate_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``pagedkv generate`` on the top-level CLI's subparsers."""
    p = subparsers.add_parser(
        "generate",
        help="serve prompts with a real model on the paged pool (SGLang's scheduler)",
        description="Load a Hugging Face causal LM (or a random-weight one), size the KV pool "
        "as SGLang does from the GPU's free memory, serve the prompts with SGLang's scheduler "
        "(admission, retraction, radix cache) and greedy sampling, and print each output. "
        "Without a GPU it runs on the CPU, the decode kernel through Triton's interpreter.",
    )
    p.add_argument("--model", default="tiny",
                   help="a hub id or local folder, or random weights: 'tiny' (2-layer Llama, "
                   "the default) or 'random:<arch>[:<size>]' (arch llama, mistral, qwen2, qwen3; "
                   "size tiny or qwen2.5-0.5b)")
    p.add_argument("--prompt", action="append", default=[], metavar="TEXT",
                   help="a prompt (repeatable; needs a model with a tokenizer)")
    p.add_argument("--prompt-ids", action="append", default=[], metavar="IDS",
                   help="a prompt as comma-separated token ids (repeatable)")
    p.add_argument("--num-prompts", type=int, default=4,
                   help="random prompts when none is given (default 4)")
    p.add_argument("--max-new-tokens", type=int, default=32, help="cap per request (default 32)")
    p.add_argument("--ignore-eos", action="store_true", help="run every request to its cap")
    p.add_argument("--device", help="cpu or cuda (default: cuda when there is one)")
    p.add_argument("--dtype", help="float32, float16 or bfloat16 (default: bf16 on sm_80+, "
                   "fp16 on older GPUs, fp32 on the CPU)")
    p.add_argument("--page-size", type=int, default=1, help="tokens per KV page (default 1)")
    p.add_argument("--mem-fraction-static", type=float, metavar="F",
                   help="share of the free GPU memory kept for weights + KV (default SGLang's)")
    p.add_argument("--max-total-tokens", type=int, metavar="TOKENS",
                   help=f"cap on the pool in tokens (default on the CPU: {CPU_POOL_TOKENS})")
    p.add_argument("--disable-radix-cache", action="store_true",
                   help="turn SGLang's prefix cache off")
    p.add_argument("--sglang-version", default="0.5.23", choices=("0.5.23", "0.5.9"),
                   help="the SGLang release whose scheduler is followed (default 0.5.23)")
    p.add_argument("--seed", type=int, default=0, help="seed of random weights and prompts")
    p.add_argument("--log", action="store_true", help="print SGLang's log lines first")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run_generate)


def model_source(name: str) -> Any:
    """``--model`` as a loader source: a random-weight config, or the hub id / folder."""
    if name == "tiny":
        name = "random:llama"
    if not name.startswith("random:"):
        return name
    from pagedkv.model_executor.model_loader import random_model_config

    arch, _, size = name.removeprefix("random:").partition(":")
    return random_model_config(arch, size or "tiny")


def parse_ids(text: str) -> list[int]:
    """``"1, 2,3"`` -> ``[1, 2, 3]``; ConfigError for anything else."""
    try:
        return [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise bad_value("--prompt-ids", text, "comma-separated integers") from None


def run_generate(args: argparse.Namespace) -> int:
    """``pagedkv generate``: load, serve, print; return 0.

    Raises:
        ConfigError: a bad model, device, dtype, size or prompt (named, before any work).
        NotEnoughMemoryError: the weights leave no room for a pool.
    """
    check_positive_int("--num-prompts", args.num_prompts)
    check_positive_int("--max-new-tokens", args.max_new_tokens)
    from pagedkv.engine import Engine
    from pagedkv.model_executor.model_loader import resolve_device

    device = resolve_device(args.device)
    pool = args.max_total_tokens
    if pool is None and device.type == "cpu":
        pool = CPU_POOL_TOKENS
    engine = Engine.from_pretrained(
        model_source(args.model), device=device, dtype=args.dtype, page_size=args.page_size,
        mem_fraction_static=args.mem_fraction_static, max_total_tokens=pool, seed=args.seed,
        radix_cache=not args.disable_radix_cache, sglang_version=args.sglang_version)
    runner = engine.executor
    prompts: list[Any] = [*args.prompt, *(parse_ids(t) for t in args.prompt_ids)]
    if not prompts:
        import numpy as np

        rng = np.random.default_rng(args.seed)
        prompts = [rng.integers(0, runner.vocab_size, int(rng.integers(8, 33))).tolist()
                   for _ in range(args.num_prompts)]
    res = engine.generate(prompts, args.max_new_tokens, ignore_eos=args.ignore_eos)
    texts = res.texts
    rows = [{"rid": r.rid, "prompt_len": r.prompt_len, "output_len": r.generated,
             "finish_reason": r.finish_reason, "retractions": r.num_retractions,
             "cached_tokens": r.cached_tokens, "output_ids": list(r.output_ids or []),
             **({"text": texts[r.rid]} if texts is not None else {})} for r in res.requests]
    if args.json:
        out = {"meta": res.trace.meta.to_dict(), "metrics": res.metrics.as_dict(),
               "outputs": rows, **({"log": res.log} if args.log else {})}
        print(json.dumps(out, indent=2))
        return 0
    if args.log:
        print("\n".join(res.log))
    meta = res.trace.meta
    print(f"{meta.model} on {meta.gpu}: pool {meta.max_total_num_tokens:,} tokens (page_size "
          f"{meta.page_size}), SGLang {meta.sglang_version} scheduler, radix cache "
          f"{'on' if meta.radix_cache else 'off'}; {len(rows)} requests, "
          f"{res.metrics.output_tokens} tokens in {res.metrics.duration_s:.2f} s of forward passes")
    for row in rows:
        shown = row.get("text", row["output_ids"])
        print(f"[{row['rid']}] {row['prompt_len']} prompt + {row['output_len']} output tokens "
              f"({row['finish_reason']}, {row['retractions']} retractions, {row['cached_tokens']} "
              f"cached): {shown!r}")
    return 0
