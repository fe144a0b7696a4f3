"""Chapters 1 and 3 on a real model: the pool from the card's free memory, and page sizes on
real K/V.

:func:`real_pool` loads the model the way SGLang does (free memory read before and after the
weights arrive, ``ModelRunner.load``), sizes the pool with ``profile_max_num_token``, allocates
it and measures what the allocation took. :func:`page_sizes` serves the same prompts with
pages of 1, 16 and 64 tokens and measures pages held, slots wasted in last pages, decode
step time, and whether the tokens change (they must not). See :mod:`pagedkv.lessons.on_gpu`
for which model runs where.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain, repeat

import numpy as np
import torch

from pagedkv.lessons.on_gpu import (
    Report,
    Setup,
    make_engine,
    prompts,
    size,
    step_seconds,
    warm_up,
)
from pagedkv.model_executor.model_loader import free_memory
from pagedkv.model_executor.model_runner import ModelRunner
from pagedkv.units import MiB

CPU_CARD_MIB = 15_360  # the CPU stand-in pretends to be a Colab T4 (what nvidia-smi reports)
CPU_POOL_CAP = 65_536  # ... and allocates at most this many tokens of its formula's pool


def real_pool(setup: Setup) -> Report:
    """Load the model measuring free memory, size and allocate the pool as SGLang does.

    On the CPU nothing can be measured: the readings are those of a pretend 15,360 MiB card
    (free before = all of it, after = minus the weights' bytes) and the pool is capped at
    :data:`CPU_POOL_CAP` tokens; the report says so.
    """
    fake = None
    if not setup.on_gpu:
        from pagedkv.model_executor.model_loader import load_causal_lm

        probe, _ = load_causal_lm(setup.source, setup.device, setup.dtype)
        weights = sum(p.numel() * p.element_size() for p in probe.parameters())
        card = CPU_CARD_MIB * MiB
        readings = chain([(card, card)], repeat((card - weights, card)))
        fake = lambda: next(readings)  # noqa: E731 - a reading, as torch.cuda.mem_get_info
    runner = ModelRunner.load(setup.source, device=setup.device, dtype=setup.dtype, page_size=1,
                              max_total_tokens=None if setup.on_gpu else CPU_POOL_CAP,
                              mem_get_info=fake)
    plan = runner.plan
    if plan is None:  # load() always plans when it reads free memory
        raise AssertionError("no pool plan")
    pool_k, pool_v = runner.token_to_kv_pool.kv_size_bytes()
    after_pool = free_memory(setup.device, fake)
    took = plan.post_free_bytes - after_pool[0] if setup.on_gpu else pool_k + pool_v
    model = runner.model
    params = sum(p.numel() for p in model.parameters())
    elem = torch.finfo(setup.dtype).bits // 8
    cfg = model.config
    layers, heads, dim = cfg.num_hidden_layers, cfg.num_key_value_heads, runner.token_to_kv_pool.head_dim
    pre, post, f, cell = plan.pre_free_bytes, plan.post_free_bytes, plan.mem_fraction_static, plan.cell_size
    total_mib = after_pool[1] // MiB
    formula_tokens = int((post - pre * (1 - f)) // cell)
    rows: list[tuple[object, ...]] = [
        ("free before loading (pre)", "measured" if setup.on_gpu else "pretend", size(pre)),
        ("free after loading (post)", "measured" if setup.on_gpu else "pretend: pre - weights",
         size(post)),
        ("weights", f"pre - post (params: {params:,} x {elem} B = {size(params * elem)})",
         size(pre - post)),
        ("mem_fraction_static f", f"SGLang's default for a {total_mib:,} MiB card", f"{f}"),
        ("cell size", f"2 x {layers} layers x {heads} KV heads x {dim} x {elem} B", f"{cell:,} B"),
        ("max_total_num_tokens", f"floor((post - pre x (1 - f)) / cell) = {formula_tokens:,}",
         f"{plan.max_total_num_tokens:,}"),
        ("pool allocated (K + V)", f"(tokens + 1 padding) x {cell:,} B", size(pool_k + pool_v)),
        ("free memory the pool took", "measured" if setup.on_gpu else "not measurable on a CPU",
         size(took) if setup.on_gpu else "-"),
    ]
    lines = [setup.describe(serves=False)]
    if setup.on_gpu:
        lines.append(f"The pool's K and V buffers take {size(pool_k + pool_v)}; free memory fell by "
                     f"{size(took)} when they were allocated (torch's allocator rounds each of "
                     f"the {2 * layers} buffers up to its block size). The formula is the pool.")
    else:
        lines.append(f"The formula gives {formula_tokens:,} tokens for the pretend card; the CPU "
                     f"stand-in allocates {plan.max_total_num_tokens:,} of them (the "
                     "`--max-total-tokens` cap), to spare the machine's RAM.")
    lines.append(f"At the model's context length of {plan.context_len:,} tokens, "
                 f"B_max = {plan.batch_cap:,} requests fit at full length.")
    del runner
    if setup.on_gpu:
        torch.cuda.empty_cache()
    return Report(setup, lines, ("quantity", "how", "value"), rows, plan.log_lines(),
                  meaningless="The free-memory readings are those of a pretend card and the model is "
                  "a toy, so the pool in bytes and tokens, the cell size and B_max describe no real "
                  "card; only how the rows follow from one another holds.")


def peak_note(peaks: Sequence[tuple[int, int, int, int, int]]) -> str:
    """The line that defines the page-size table's peak columns. ``peaks``: per page size,
    ``(p, peak step counted from 1, steps in the run, peak pages, tokens held at the peak
    step)``. The step is the first that holds the most pages; a larger page can reach that
    sooner, while fewer tokens are written, so the tokens there may differ with p although the
    run's tokens do not."""
    line = ("Peak pages: the most pages the run held at once. Peak at step: the first step that "
            "held them, of the run's steps (prefill steps included). Slots held / with a token "
            "then: the slots those pages hold, and how many of them hold a token, at that step.")
    p0, s0, _, _, t0 = peaks[0]
    early = [pk for pk in peaks[1:] if pk[4] != t0]
    if early:
        p, s, _, pages, t = early[-1]
        line += (f" The steps differ with p: at p = {p} the run holds its {pages:,} pages from "
                 f"step {s:,}, when {t:,} tokens are written, and at p = {p0} the peak comes at "
                 f"step {s0:,}, with {t0:,}.")
    return line


def page_sizes(setup: Setup, sizes: Sequence[int] = (1, 16, 64)) -> Report:
    """Serve the same prompts with each page size (radix cache off, so every page belongs to
    one request) and compare what the pool held, what was wasted, and the tokens."""
    gpu = setup.on_gpu
    n, max_new, pool = (16, 128, 16_384) if gpu else (3, 4, 512)
    ids = prompts(setup, n, seed=3)
    rows, first, cell, peaks = [], None, 0, []
    for i, p in enumerate(sizes):
        eng = make_engine(setup, pool, p, radix_cache=False)
        if i == 0:
            warm_up(eng)
        res = eng.generate(ids, max_new)
        steps = res.trace.steps
        held = np.asarray(steps["pages_used"]) * p
        used = np.asarray(steps["tokens_used"])
        dec = np.asarray(steps["kind"]) == "decode"
        peak = int(np.argmax(held))  # the first step that holds the most slots
        peaks.append((p, peak + 1, len(held), int(held[peak]) // p, int(used[peak])))
        waste = float((held - used)[dec].sum() / max(held[dec].sum(), 1))
        page_ids = sum(-(-(r.prompt_len + r.generated - 1) // p) for r in res.requests)
        ms = 1e3 * step_seconds(res.trace, "decode") / max(int(dec.sum()), 1)
        first = first or res.outputs
        cell = res.trace.meta.cell_size
        rows.append((p, size(p * cell), f"{held[peak] // p:,}", f"{peak + 1:,} of {len(held):,}",
                     f"{held[peak]:,} / {used[peak]:,}", f"{waste:.1%}", f"{page_ids:,}",
                     f"{ms:.1f}", "yes" if res.outputs == first else "NO"))
    out_lens = sorted(len(o) for o in first or [])
    spread = (f"{out_lens[0]}" if out_lens[0] == out_lens[-1]
              else f"{out_lens[0]}-{out_lens[-1]}")
    lines = [setup.describe(),
             f"{n} prompts, up to {max_new} new tokens each (outputs of {spread} tokens), a pool of "
             f"{pool:,} tokens, radix cache off. One token of KV costs {cell:,} B, so a page of p "
             f"tokens costs p x {cell:,} B.",
             "Wasted: the share of held slots that hold no token (the unused tail of each "
             "request's last page), averaged over decode steps. Page ids: entries of a table "
             "with one id per page (what FA3 reads) at the end; SGLang's `req_to_token` keeps "
             "one entry per token whatever p is, and hands FlashInfer and Triton those. The "
             "decode kernel reads one slot id per token, so p does "
             "not change its work, and the generated tokens are the same for every p (the "
             "last column).",
             peak_note(peaks)]
    if not setup.on_gpu:
        lines.append("On the CPU the step times are Triton's interpreter, and they wander from run "
                     "to run with the machine's load: read the GPU's figures for speed.")
    header = ("p", "bytes per page", "peak pages", "peak at step", "slots held / with a token then",
              "wasted", "page ids", "decode ms/step", "same generated tokens as p=1")
    return Report(setup, lines, header, rows,
                  meaningless="The decode times are Triton's interpreter on a CPU and say nothing "
                  "about speed, and the bytes per page are the toy model's; the pages, the waste "
                  "and the equal tokens hold on any hardware.")
