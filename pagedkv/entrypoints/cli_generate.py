"""``pagedkv generate``: serve prompts with a real model through the scheduler, print the
outputs and SGLang's log.

``pagedkv.entrypoints.cli`` registers it with :func:`add_generate_parser`; :func:`run_generate` does the
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
import sys
from typing import Any

from pagedkv.entrypoints.cli_generate_output import DecodeProgress, print_result
from pagedkv.errors import bad_value, check_positive_int, check_real
from pagedkv.releases import DEFAULT_SGLANG_VERSION, RELEASES

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
                   help="fraction in (0, 1] of the free GPU memory kept for weights + KV "
                   "(default SGLang's for the card; the CPU measures nothing and ignores it)")
    p.add_argument("--max-total-tokens", type=int, metavar="TOKENS",
                   help=f"cap on the pool in tokens, rounded down to whole pages (default on "
                   f"the CPU: {CPU_POOL_TOKENS})")
    p.add_argument("--disable-radix-cache", action="store_true",
                   help="turn SGLang's prefix cache off")
    p.add_argument("--disable-overlap-schedule", action="store_true",
                   help="SGLang's flag: disable the overlap scheduler, which overlaps the CPU scheduler "
                   "with the GPU model worker; the normal loop runs instead, each pass's result "
                   "processed before the next is scheduled (default: the overlap loop)")
    p.add_argument("--chunked-prefill-size", type=int, metavar="TOKENS",
                   help="prompt tokens per prefill pass before a prompt is chunked; -1 turns "
                   "chunking off (default SGLang's: by GPU memory, 8192 on the CPU)")
    p.add_argument("--max-running-requests", type=int, metavar="N",
                   help="cap on the running batch (default: the pool's, as SGLang)")
    p.add_argument("--schedule-conservativeness", type=float, metavar="C",
                   help="scales the initial new_token_ratio, 0.7 x C capped at 1; > 1 admits "
                   "fewer requests and retracts less (default 1.0)")
    p.add_argument("--sglang-version", default=DEFAULT_SGLANG_VERSION, choices=tuple(RELEASES),
                   help="the SGLang release whose scheduler is followed "
                   f"(default {DEFAULT_SGLANG_VERSION})")
    p.add_argument("--seed", type=int, default=0, help="seed of random weights and prompts")
    p.add_argument("--log", action="store_true", help="print SGLang's log lines first")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object (per request: ids, text, TTFT/TPOT in seconds)")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bar (it shows on a terminal only, on stderr)")
    p.set_defaults(func=run_generate)


RANDOM_MODELS = ", 'tiny' or 'random:<arch>[:<size>]' (random weights)"


def model_source(name: str) -> Any:
    """``--model`` as a loader source: a random-weight config, or the checked hub id / folder.

    Raises:
        ConfigError: a folder that does not exist or has no ``config.json``, or a hub id that
            cannot be had now (:func:`~pagedkv.model_executor.hub.checkpoint_kwargs`).
    """
    if name == "tiny":
        name = "random:llama"
    if not name.startswith("random:"):
        from pagedkv.model_executor.hub import checkpoint_kwargs

        checkpoint_kwargs(name, RANDOM_MODELS)  # fails at once, before torch loads anything
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


def scheduler_options(args: argparse.Namespace) -> dict[str, Any]:
    """The scheduler flags given, as :class:`~pagedkv.managers.config.SchedulerConfig`
    fields (an absent flag keeps SGLang's default for the card and the pool).

    Raises:
        ConfigError: a size below 1 (``--chunked-prefill-size`` -1 excepted: off, as in
            SGLang), a conservativeness that is not a finite number > 0.
    """
    options: dict[str, Any] = {"disable_overlap_schedule": args.disable_overlap_schedule}
    if args.chunked_prefill_size is not None:
        if args.chunked_prefill_size == -1:
            options["chunked_prefill_size"] = None
        else:
            options["chunked_prefill_size"] = check_positive_int(
                "--chunked-prefill-size", args.chunked_prefill_size)
    if args.max_running_requests is not None:
        options["max_running_requests"] = check_positive_int(
            "--max-running-requests", args.max_running_requests)
    if args.schedule_conservativeness is not None:
        options["schedule_conservativeness"] = check_real(
            "--schedule-conservativeness", args.schedule_conservativeness, 0.0, open_low=True)
    return options


def run_generate(args: argparse.Namespace) -> int:
    """``pagedkv generate``: load, serve, print; return 0.

    Notes on the settings (a CPU ignores ``--mem-fraction-static``) and every request whose
    ``--max-new-tokens`` the scheduler lowered go to stderr, one line each.

    Raises:
        ConfigError: a bad model, device, dtype, size, scheduler option or prompt (named,
            before any work).
        NotEnoughMemoryError: the weights leave no room for a pool.
    """
    check_positive_int("--num-prompts", args.num_prompts)
    check_positive_int("--max-new-tokens", args.max_new_tokens)
    check_positive_int("--seed", args.seed, minimum=0)
    options = scheduler_options(args)
    source = model_source(args.model)
    from pagedkv.entrypoints.engine import Engine
    from pagedkv.model_executor.model_loader import resolve_device

    device = resolve_device(args.device)
    pool = args.max_total_tokens
    if pool is None and device.type == "cpu":
        pool = CPU_POOL_TOKENS
    engine = Engine.from_pretrained(
        source, device=device, dtype=args.dtype, page_size=args.page_size,
        mem_fraction_static=args.mem_fraction_static, max_total_tokens=pool, seed=args.seed,
        radix_cache=not args.disable_radix_cache, sglang_version=args.sglang_version, **options)
    runner = engine.executor
    for note in runner.notes:
        print(f"pagedkv generate: note: {note}", file=sys.stderr)
    prompts: list[Any] = [*args.prompt, *(parse_ids(t) for t in args.prompt_ids)]
    if not prompts:
        import numpy as np

        rng = np.random.default_rng(args.seed)
        prompts = [rng.integers(0, runner.vocab_size, int(rng.integers(8, 33))).tolist()
                   for _ in range(args.num_prompts)]
    with DecodeProgress(disable=True if args.no_progress else None) as bar:
        res = engine.generate(prompts, args.max_new_tokens, ignore_eos=args.ignore_eos,
                              on_step=bar.update)
    for clamp in res.clamps:
        print(f"pagedkv generate: {clamp.message()}", file=sys.stderr)
    print_result(res, args.json, args.log)
    return 0
