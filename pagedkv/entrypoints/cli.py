"""The ``pagedkv`` command line: ``pagedkv size``, ``pagedkv simulate`` and ``pagedkv generate``
(also ``python -m pagedkv``).

Bad input prints one ``error: ...`` line naming the parameter, its value and the valid
range, and exits with status 2 (argparse's convention), never with a traceback.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import replace

from pagedkv.configs.dsa_config import indexer_bytes_per_token
from pagedkv.configs.model_config import ModelSpec
from pagedkv.configs.model_family import ONE_POOL_WHEN_SWA_DISABLED
from pagedkv.configs.model_presets import MODEL_PRESETS, load_model
from pagedkv.dsa_indexer import DSA_PAGE_SIZE
from pagedkv.entrypoints.cli_generate import add_generate_parser
from pagedkv.entrypoints.cli_simulate import add_simulate_parser
from pagedkv.errors import PagedKVError, bad_value, check_real
from pagedkv.gpus import GPU_PRESETS, get_gpu
from pagedkv.releases import DEFAULT_SGLANG_VERSION, SGLANG_VERSIONS, as_release
from pagedkv.sizing import KVPoolPlan, plan_pool
from pagedkv.sizing_checks import SWA_HYBRIDS, flag_does_not_apply
from pagedkv.units import KV_DTYPE_BYTES, gib
from pagedkv.weights import preset_checkpoint_bytes


def add_size_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``pagedkv size``."""
    p = subparsers.add_parser(
        "size",
        help="size a KV pool as SGLang does at start-up",
        description="Size the KV-cache pool as SGLang does at start-up and print its log lines "
        "plus B_max. Memory is in GiB (2^30 bytes), which SGLang prints as 'GB'.",
        epilog=B_MAX_DEFINITION + " Warnings (a pool too small for one full-context request, "
        "flags the model ignores, a --gpu estimate that takes the whole card as free) follow "
        "the log lines, and are in the JSON 'warnings' list.",
    )
    p.add_argument("--model", required=True,
                   help=f"a preset ({', '.join(MODEL_PRESETS)}) or a config.json file or folder")
    p.add_argument("--gpu", help=f"GPU preset ({', '.join(GPU_PRESETS)}); its total memory is "
                   "taken as the free memory before loading (a real server measures less, "
                   "after the CUDA context: its pool is about 1-2 %% smaller)")
    p.add_argument("--free-before-gib", type=float, metavar="GIB",
                   help="free GPU memory before loading weights, GiB (SGLang: 'Load weight begin. "
                   "avail mem=')")
    p.add_argument("--free-after-gib", type=float, metavar="GIB",
                   help="free GPU memory after loading weights, GiB (SGLang: 'Load weight end. "
                   "avail mem=')")
    p.add_argument("--mem-fraction-static", type=float, metavar="F",
                   help="fraction in (0, 1] of pre-load free memory kept for weights + KV pool; "
                   "default: SGLang's for the GPU")
    p.add_argument("--tp", type=int, default=1, help="attention tensor-parallel size (default 1)")
    p.add_argument("--page-size", type=int, default=1, help="tokens per KV page, >= 1 (default 1)")
    p.add_argument("--kv-cache-dtype", default="bf16", choices=sorted(KV_DTYPE_BYTES),
                   help="KV element type (default bf16; fp8 types take 1 byte)")
    p.add_argument("--context-len", type=int, metavar="TOKENS",
                   help="context length in tokens (default: the model's max_position_embeddings)")
    p.add_argument("--max-total-tokens", type=int, metavar="TOKENS",
                   help="cap on the pool in tokens (SGLang's --max-total-tokens)")
    p.add_argument("--weights-gib", type=float, metavar="GIB",
                   help="weights per GPU in GiB, overriding the estimate from the config "
                   "(required for quantized models; not with the two readings, whose "
                   "difference is the weights)")
    p.add_argument("--sglang-version", default=DEFAULT_SGLANG_VERSION, choices=SGLANG_VERSIONS,
                   help="whose default mem_fraction_static, request rows and log lines to follow "
                   f"(default {DEFAULT_SGLANG_VERSION})")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of log lines")
    add_pool_flags(p)
    p.set_defaults(func=run_size)


#: What ``B_max`` means, in ``size --help`` and next to the number it prints.
B_MAX_DEFINITION = ("B_max: how many requests fit in the pool at once if each grows to the "
                    "full context (floor(pool tokens / context_len), fewer where a hybrid's "
                    "window pool or state slots run out first); 0 means not even one.")


def add_pool_flags(p: argparse.ArgumentParser) -> None:
    """SGLang's server limits that apply to every model, then its flags that only change
    how a hybrid (or multimodal) model's pools are split."""
    limits = p.add_argument_group("server limits (every model)")
    limits.add_argument("--max-running-requests", type=int, metavar="N",
                        help="SGLang's cap on running requests (default: from the pool)")
    limits.add_argument("--chunked-prefill-size", type=int, metavar="TOKENS",
                        help="SGLang's prefill chunk, -1 (off) or >= 1 (default: the GPU "
                        "preset's); it sets the default --mem-fraction-static's reserve")
    g = p.add_argument_group(
        "pools of hybrid and multimodal models (SGLang 0.5.23)",
        "A flag here that cannot touch the model's pools (a ratio of a sliding-window or "
        "linear-attention hybrid, --enable-multimodal on a text model) is ignored with a "
        "warning, as SGLang ignores it; --disable-radix-cache and --disable-overlap-schedule "
        "leave a one-pool model's pool as it is.")
    g.add_argument("--disable-hybrid-swa-memory", action="store_true",
                   help="SGLang's flag: a sliding-window hybrid (gpt-oss, Llama 4) gets one "
                   "full-length pool for every layer instead of a full and a sliding-window pool")
    g.add_argument("--disable-radix-cache", action="store_true",
                   help="SGLang's flag: no prefix cache (a sliding-window pool sized from "
                   "--max-running-requests; one state slot per request instead of 3 plus "
                   "the radix cache's track slots)")
    g.add_argument("--disable-overlap-schedule", action="store_true",
                   help="SGLang's flag: with the radix cache, a linear-attention hybrid's "
                   "requests hold one track slot (none with --page-size 1) instead of two")
    g.add_argument("--swa-full-tokens-ratio", type=float, metavar="R",
                   help="SWA tokens per full token, in (0, 1] (default 0.8)")
    g.add_argument("--mamba-full-memory-ratio", type=float, metavar="R",
                   help="state bytes per KV byte of a linear-attention hybrid, > 0 (default 0.9)")
    g.add_argument("--max-mamba-cache-size", type=int, metavar="SLOTS",
                   help="state slots of a linear-attention hybrid (default: from the ratio)")
    g.add_argument("--enable-multimodal", action="store_true",
                   help="SGLang's flag: keep Gemma 3's vision path (served text-only by default): "
                   "100 MiB of the KV budget for image features, a smaller default fraction")


def plan_from_args(args: argparse.Namespace) -> KVPoolPlan:
    """Turn parsed ``size`` arguments into a :class:`KVPoolPlan`.

    Raises:
        ConfigError: a memory reading that is NaN, infinite or negative, and everything
            ``plan_pool`` refuses (a NaN or infinite ``mem_fraction_static`` included); each
            names the flag, its value and the valid range.
    """
    for flag, low, strict in (("--free-before-gib", 0.0, True), ("--free-after-gib", 0.0, False),
                              ("--weights-gib", 0.0, False)):
        value = getattr(args, flag[2:].replace("-", "_"))
        if value is not None:
            check_real(flag, value, low, open_low=strict, unit=" GiB")
    model = load_model(args.model, args.disable_hybrid_swa_memory)
    gpu = get_gpu(args.gpu) if args.gpu else None
    measured = (args.free_before_gib, args.free_after_gib)
    if (measured[0] is None) != (measured[1] is None):
        raise PagedKVError("--free-before-gib and --free-after-gib go together; give both or neither")
    if gpu is None and measured[0] is None:
        raise PagedKVError("give --gpu, or both --free-before-gib and --free-after-gib")
    if measured[0] is not None and args.weights_gib is not None:
        raise PagedKVError(
            f"--weights-gib={args.weights_gib} cannot be used with --free-before-gib and "
            "--free-after-gib: the readings' difference is the weights as loaded; give one or "
            "the other")
    if gpu is None and args.mem_fraction_static is None:
        raise PagedKVError(
            "--mem-fraction-static is required when no --gpu is given (SGLang's default "
            "comes from the GPU's total memory); valid: a fraction in (0, 1], or add --gpu")
    if measured[0] is not None and measured[1] > measured[0]:
        raise bad_value("--free-after-gib", measured[1],
                        f"at most --free-before-gib={measured[0]} (loading weights frees no memory)")
    return plan_pool(
        model,
        gpu=gpu,
        pre_free_bytes=None if measured[0] is None else gib(measured[0]),
        post_free_bytes=None if measured[1] is None else gib(measured[1]),
        mem_fraction_static=args.mem_fraction_static,
        tp=args.tp,
        page_size=args.page_size,
        kv_cache_dtype=args.kv_cache_dtype,
        context_len=args.context_len,
        max_total_tokens=args.max_total_tokens,
        weights_bytes=None if args.weights_gib is None else gib(args.weights_gib),
        sglang_version=args.sglang_version,
        max_running_requests=args.max_running_requests,
        chunked_prefill_size=args.chunked_prefill_size,
        disable_radix_cache=args.disable_radix_cache,
        swa_full_tokens_ratio=args.swa_full_tokens_ratio,
        mamba_full_memory_ratio=args.mamba_full_memory_ratio,
        max_mamba_cache_size=args.max_mamba_cache_size,
        enable_multimodal=args.enable_multimodal,
        disable_overlap_schedule=args.disable_overlap_schedule,
    )


def pool_summary(model: ModelSpec, args: argparse.Namespace) -> str:
    """One line saying which pools SGLang builds for ``model`` (in ``--sglang-version``) and
    where the weight size came from (the figures themselves are in the log lines)."""
    sizer = ("SGLang's DefaultPoolConfigurator"
             if as_release(args.sglang_version).sized_by_pool_configurator
             else "SGLang's ModelRunner.init_memory_pool")
    attention = ("multi-head latent attention: one latent per token and layer" if model.is_mla
                 else f"{model.attention_kind}: K and V heads per layer")
    if model.index_head_dim:  # DeepSeek V3.2's sparse attention (pagedkv.dsa_indexer)
        attention += (f" and one index key of {indexer_bytes_per_token(model.index_head_dim)} B "
                      "(fp8 key + fp32 scale) for DeepSeek's sparse-attention indexer, pages "
                      f"of {DSA_PAGE_SIZE} tokens")
    moe = f", {model.num_experts} experts per MoE layer" if model.is_moe else ""
    if args.free_before_gib is not None:
        weights = "the two free-memory readings"
    elif args.weights_gib is not None:
        weights = "--weights-gib"
    elif model.checkpoint_bytes is not None and model.name in preset_checkpoint_bytes():
        weights = "the checkpoint's model.safetensors.index.json total, shipped with the preset"
    elif model.checkpoint_bytes is not None:
        weights = "the checkpoint's model.safetensors.index.json"
    elif model.sglang_rank_bytes:
        weights = ("SGLang 0.5.23's own model class and quantization built on the meta device "
                   "(per GPU, shipped with the preset)")
    else:
        weights = "the parameter count of the model built on the meta device"
    full = model.num_full_attention_layers
    if model.family == "swa":
        pools = (f"a full pool for {full} full-attention layers and a sliding-window pool for "
                 f"{model.num_swa_layers} window layers (SGLang's window: {model.sliding_window} "
                 f"tokens; {attention}{moe})")
    elif model.family == "linear":
        pools = (f"a KV pool for {full} full-attention layers and one state slot per request "
                 f"for {model.num_linear_layers} linear-attention layers ({attention}{moe}; "
                 f"{sizer} and MambaPool)")
    else:
        swa = ", window layers full-length under --disable-hybrid-swa-memory" if (
            args.disable_hybrid_swa_memory
            and model.architecture in ONE_POOL_WHEN_SWA_DISABLED) else ""
        pools = (f"one KV pool for all {model.num_hidden_layers} layers ({attention}{moe}{swa}; "
                 f"{sizer})")
    return f"pools: {pools}; weights from {weights}"


def ignored_swa_flag_warnings(args: argparse.Namespace) -> tuple[str, ...]:
    """``--disable-hybrid-swa-memory`` on a model without a sliding-window pool: SGLang
    ignores it (it only merges a hybrid's two pools), so pagedkv warns (the flags
    :func:`plan_pool` reads are checked there)."""
    if not args.disable_hybrid_swa_memory:
        return ()
    model = load_model(args.model)
    if model.family == "swa" or model.architecture in ONE_POOL_WHEN_SWA_DISABLED:
        return ()
    return (flag_does_not_apply("--disable-hybrid-swa-memory", model, SWA_HYBRIDS),)


def run_size(args: argparse.Namespace) -> int:
    """``pagedkv size``: print SGLang's start-up lines and B_max, or one JSON object, then
    the warnings (:attr:`KVPoolPlan.notes`).

    Raises:
        PagedKVError: from :func:`plan_from_args` (printed by :func:`main` as one line).
    """
    plan = plan_from_args(args)
    plan = replace(plan, notes=ignored_swa_flag_warnings(args) + plan.notes)
    if args.json:  # the log lines, and so a cap that did nothing, are in the text output
        print(json.dumps(plan.as_dict(), indent=2))
        return 0
    print("\n".join(plan.log_lines()))
    print(pool_summary(load_model(args.model, args.disable_hybrid_swa_memory), args))
    extra = ""
    if plan.is_swa:
        extra = (f" + {plan.swa_cell_size:,} B per SWA token "
                 f"({plan.swa_max_total_num_tokens:,} SWA tokens)")
    elif plan.mamba_slots:
        extra = (f" + {plan.state_bytes:,} B per state slot ({plan.mamba_slots:,} slots, "
                 f"{plan.state_bytes * plan.mamba_slots / 2**30:.2f} GiB)")
    print(
        f"bytes per token: {plan.cell_size:,} B ({plan.cell_size / 1024:g} KiB){extra}; "
        f"{'pools' if extra else 'pool'}: {plan.pool_bytes / 2**30:.2f} GiB; "
        f"B_max at {plan.context_len:,} tokens of context: {plan.batch_cap} (requests that "
        "fit at once if each grows to the full context)"
    )
    for note in plan.notes:
        print(f"warning: {note}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every subcommand."""
    parser = argparse.ArgumentParser(prog="pagedkv", description="KV-cache memory, as SGLang manages it.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    subparsers = parser.add_subparsers(dest="command", required=True)
    add_size_parser(subparsers)
    add_simulate_parser(subparsers)
    add_generate_parser(subparsers)
    return parser


def package_version() -> str:
    """The installed package's version (``importlib.metadata``); the source tree's
    ``pagedkv.__version__`` when pagedkv runs uninstalled (from a checkout on ``PYTHONPATH``)."""
    try:
        return importlib.metadata.version("pagedkv")
    except importlib.metadata.PackageNotFoundError:
        from pagedkv import __version__

        return __version__


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``pagedkv`` console script.

    An unknown flag is reported with the usage of the subcommand it was given to (argparse
    alone reports it against the top-level usage, which lists no flags).
    """
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        subparsers = next(a for a in parser._actions
                          if isinstance(a, argparse._SubParsersAction))
        subparsers.choices[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        return args.func(args)
    except PagedKVError as exc:
        print(f"pagedkv {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except MemoryError:  # a run too long for this machine: say so, not numpy's traceback
        print(f"pagedkv {args.command}: error: out of memory (a simulated run holds about 1 GiB "
              "per million requests); run fewer requests, or split the trace", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C outside a run's loop (a run reports its partial summary)
        print(f"pagedkv {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (``| head``): stop quietly, as cat does
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - Python flushes stderr at exit
        return 0


if __name__ == "__main__":
    sys.exit(main())
