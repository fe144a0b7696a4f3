"""``pagedkv simulate``'s requests: a built-in workload or a requests file, with arrival times.

Arrivals from a requests file: ``--all-at-once`` puts every request at t=0; else ``--rate`` draws a
Poisson process (seeded by ``--seed``, the file's times ignored); else the file's
``arrival_s``; else t=0. A later turn of a conversation is sent no earlier than the turn
before it finishes, whichever applies.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from pagedkv.configs.model_presets import load_model
from pagedkv.errors import bad_value
from pagedkv.workloads.prefix import as_specs, multi_turn, with_system_prompt
from pagedkv.workloads.request_files import detect_format, load_requests, open_requests
from pagedkv.workloads.request_rows import RequestFile, relative_arrivals
from pagedkv.workloads.sharegpt import has_tokenizer
from pagedkv.workloads.synthetic import RequestSpec, arrivals, fixed, sharegpt_like, uniform


def _long_workload(n: int, rate: float | None, seed: int) -> list[RequestSpec]:
    """The traffic of the book's running case (:data:`pagedkv.workloads.cases.LONG_ANSWERS`)."""
    from pagedkv.workloads.cases import LONG_ANSWERS

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
DEFAULT_NUM_REQUESTS = 1000  # of a built-in workload; a requests file runs whole by default
DEFAULT_WORKLOAD = "sharegpt"


@dataclass(frozen=True)
class _GivenSpecs:
    """A built-in workload's requests, the same list each call (a class, not a lambda, so
    that a sweep can send it to worker processes and Ray tasks)."""

    specs: list[RequestSpec]

    def __call__(self) -> list[RequestSpec]:
        return self.specs


@dataclass(frozen=True)
class _FileSpecs:
    """A requests file's requests with their arrival times, read afresh each call."""

    requests: RequestFile
    times: np.ndarray

    def __call__(self) -> Iterable[RequestSpec]:
        return self.requests.specs(self.times)


@dataclass
class Workload:
    """The requests of a run, re-made for every run of a sweep.

    Attributes:
        description: what they are, for the summary.
        arrivals: how their arrival times were set, for the summary.
        num_requests: how many.
        make_specs: a fresh iterable of the requests (rid order) each call; picklable.
        source: the requests file they came from, or None.
        notes: what the file reader assumed (token estimates, skipped turns).
    """

    description: str
    arrivals: str
    num_requests: int
    make_specs: Callable[[], Iterable[RequestSpec]]
    source: RequestFile | None = None
    notes: list[str] = field(default_factory=list)


def build_workload(args: argparse.Namespace) -> Workload:
    """The workload ``args`` ask for (``--requests-file`` or ``--workload``), with its arrivals.

    Raises:
        ConfigError: an unknown workload, a bad requests file or row, a count out of range.
    """
    if args.requests_file is None:
        for flag in ("requests_format", "tokenizer", "all_at_once"):
            if getattr(args, flag):
                raise bad_value(f"--{flag.replace('_', '-')}", getattr(args, flag),
                                "only with --requests-file")
        name = args.workload or DEFAULT_WORKLOAD
        if name not in WORKLOADS:
            raise bad_value("--workload", name, ", ".join(WORKLOADS))
        n = args.num_requests or DEFAULT_NUM_REQUESTS
        specs = WORKLOADS[name](n, args.rate, args.seed)
        when = f"Poisson at {args.rate:g} requests/s (seed {args.seed})" if args.rate else "all at t=0"
        return Workload(f"{_count(n, name + ' request')} (seed {args.seed})", when, n,
                        _GivenSpecs(specs))
    context_len = args.context_len or load_model(args.model, args.disable_hybrid_swa_memory).context_len
    reqs = load_requests(args.requests_file, args.requests_format, context_len=context_len,
                         **_sharegpt_options(args))
    n = len(reqs) if args.num_requests is None else min(args.num_requests, len(reqs))
    notes = list(reqs.notes) + _unused_sharegpt_flags(args)
    if args.num_requests is not None and args.num_requests > len(reqs):
        notes.append(f"--num-requests {args.num_requests:,}: the file holds "
                     f"{_count(len(reqs), 'request')}, and all of them run")
    if args.all_at_once:
        times, when = np.zeros(n), "all at t=0 (--all-at-once)"
    elif args.rate is not None:
        times = arrivals(n, args.rate, np.random.default_rng(args.seed))
        when = f"Poisson at {args.rate:g} requests/s (seed {args.seed})"
        if reqs.arrival_s is not None:
            when += "; the file's arrival_s not used"
    elif reqs.arrival_s is not None:
        times, shift = relative_arrivals(reqs.arrival_s[:n])
        when = "the file's arrival_s" + (f", less the first one ({shift:,.3f} s) so that the run "
                                         "starts at t=0" if shift else "")
    else:
        times, when = np.zeros(n), "all at t=0 (the file has no arrival_s; --rate R draws Poisson arrivals)"
    convs = len(set(reqs.conversation[:n][reqs.conversation[:n] >= 0].tolist()))
    what = f"{_count(n, 'request')} from {args.requests_file}"
    if n < len(reqs):
        what += f" (the first {n:,} of {len(reqs):,})"
    if convs:
        what += f", {_count(convs, 'conversation')}"
    return Workload(what, when, n, _FileSpecs(reqs, times), reqs, notes)


def _unused_sharegpt_flags(args: argparse.Namespace) -> list[str]:
    """A note for each ShareGPT-only flag given with a JSON Lines or CSV file (whose rows
    carry token counts, so there is nothing to tokenize): read, and ignored, not silently."""
    with open_requests(args.requests_file) as f:
        fmt = args.requests_format or detect_format(args.requests_file, f.read(4096))
    if fmt == "sharegpt":
        return []
    given = [flag for flag, value, default in (
        ("--tokenizer", args.tokenizer, None), ("--chars-per-token", args.chars_per_token, 4.0),
        ("--sharegpt-turns", args.sharegpt_turns, "all")) if value != default]
    return [f"{flag} applies to ShareGPT files only: this {fmt} file gives token counts; "
            "ignored" for flag in given]


def _count(n: int, noun: str) -> str:
    """``1 request``, ``2 requests``."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _sharegpt_options(args: argparse.Namespace) -> dict[str, object]:
    """The ShareGPT reader's options: ``--tokenizer``, else the model's folder if it holds a
    tokenizer, else the characters-per-token estimate."""
    tokenizer, model = args.tokenizer, args.model
    folder = model if os.path.isdir(model) else os.path.dirname(model) if os.path.isfile(model) else None
    if tokenizer is None and folder is not None and has_tokenizer(folder):
        tokenizer = folder
    return {"tokenizer": tokenizer, "chars_per_token": args.chars_per_token,
            "turns": args.sharegpt_turns}
