"""Chapters 4, 5 and 8 on a real model: admission, retraction and the prefix cache with real
tokens.

Each function serves a small workload through :class:`pagedkv.entrypoints.engine.Engine` (SGLang 0.5.23's
scheduler over a real model) and reads the trace: the same trace the simulator writes, with
measured seconds in ``time_s``. The pools are capped (SGLang's ``--max-total-tokens``) so that
a few dozen requests fill them. See :mod:`pagedkv.lessons.on_gpu` for which model runs where.
"""

from __future__ import annotations

import numpy as np

from pagedkv.lessons.on_gpu import (
    Report,
    Setup,
    make_engine,
    plural,
    prompts,
    requests,
    step_seconds,
    warm_up,
)
from pagedkv.managers.config import SchedulerConfig

ADMISSION_ROWS = 12  # steps shown in chapter 4's table


def newcomer_test_words(config: SchedulerConfig, page_size: int, max_new: int) -> str:
    """What a newcomer must fit to be admitted under ``config``'s release, in words: its
    prompt, its ``max_new`` tokens (clipped at ``config.clip_max_new_tokens``) and, where the
    release charges it (``Release.extra_page_per_request``, SGLang 0.5.23's
    ``per_req_token_overhead``), one more page of ``page_size`` tokens. Source:
    ``PrefillAdder.add_one_req``."""
    words = f"its prompt plus all {min(max_new, config.clip_max_new_tokens)} tokens it may write"
    if config.release.extra_page_per_request:
        words += (f", plus the extra page ({plural(page_size, 'token')}) SGLang "
                  f"{config.sglang_version} charges every newcomer")
    return words


# Why an "idle" row can still show the decayed ratio: SGLang 0.5.23's event_loop_overlap calls
# on_idle only when there is neither a batch to launch nor a last batch to process.
_IDLE_ROW = ("A step marked idle launched no batch. The overlap loop (pagedkv's and SGLang's "
             "default) still processes the previous step's result in it, so the last requests "
             "finish there, and the ratio is reset to its initial value only in the next idle "
             "pass, one with no result left to process either (`on_idle` in SGLang 0.5.23's "
             "`event_loop_overlap`): the row shows the ratio before that reset.")


def admission(setup: Setup) -> Report:
    """Many requests at once into a small pool: who is admitted, what is reserved, and how
    long the real outputs turned out to be."""
    gpu = setup.on_gpu
    n, max_new, pool = (32, 256, 4096) if gpu else (6, 6, 80)
    eng = make_engine(setup, pool)
    warm_up(eng)
    res = eng.generate(prompts(setup, n, seed=4), max_new)
    trace, cfg = res.trace, res.config
    steps = trace.steps
    first = next(i for i, k in enumerate(steps["kind"]) if k == "prefill")
    admitted_first = sum(1 for e in trace.events_of("admit") if e.step == first)
    lens = np.asarray([r.generated for r in res.requests])
    stopped = sum(r.finish_reason == "stop" for r in res.requests)
    kinds = steps["kind"]
    show = [i for i, k in enumerate(kinds) if k == "prefill"][:ADMISSION_ROWS // 2]
    decodes = [i for i, k in enumerate(kinds) if k == "decode"]
    every = max(1, len(decodes) // (ADMISSION_ROWS - len(show)))
    show = sorted({*show, *decodes[::every]})[:ADMISSION_ROWS - 1]
    show += [len(kinds) - 1] if show[-1] != len(kinds) - 1 else []
    rows = [(steps["step"][i], steps["kind"][i], steps["num_running"][i], steps["num_waiting"][i],
             f"{steps['tokens_used'][i]:,}", f"{steps['tokens_reserved'][i]:,.0f}",
             f"{steps['tokens_free'][i]:,}", f"{steps['tokens_evictable'][i]:,}",
             f"{steps['new_token_ratio'][i]:.3f}") for i in show]
    lines = [
        setup.describe(),
        f"{n} requests arrive at once, each allowed up to {max_new} new tokens, into a pool of "
        f"{pool:,} tokens. The first prefill pass admitted {admitted_first} of them: each newcomer "
        f"must fit {newcomer_test_words(cfg, eng.page_size, max_new)}, while each running request "
        f"holds back only new_token_ratio x its remaining tokens (ratio "
        f"{cfg.init_ratio:.3f} at the start, decaying by {cfg.ratio_decay:.5f} a step).",
        (f"The outputs were {int(lens.min())}-{int(lens.max())} tokens long (median "
         f"{int(np.median(lens))}); {stopped} of {n} stopped at the model's end-of-sequence "
         "token, the rest at the cap. Nobody knew that in advance: that is what the ratio "
         "guesses." if eng.executor.eos_token_ids else
         f"Random weights have no end-of-sequence token, so every request ran to its cap of "
         f"{max_new}; a real model stops each answer at its own length, which nobody knows in "
         "advance: that is what the ratio guesses."),
        f"The run took {len(steps['step'])} steps ({sum(k == 'prefill' for k in steps['kind'])} "
        f"prefill passes) and {res.metrics.duration_s:.2f} s of forward passes; "
        f"{plural(res.metrics.num_retractions, 'retraction')} (chapter 5). In the table a "
        "request leaves \"running\" in the step it finishes (or is retracted: back to "
        "\"waiting\"); a finished request's KV stays in the radix cache as cached tokens until "
        "evicted (a retracted one keeps only its prompt pages there), so used + free + cached "
        "is the pool.",
    ]
    if any(kinds[i] == "idle" and steps["new_token_ratio"][i] != cfg.init_ratio for i in show):
        lines.append(_IDLE_ROW)
    header = ("step", "kind", "running", "waiting", "tokens used", "reserved", "free",
              "cached (evictable)", "ratio")
    log = [line for line in trace.log if line.startswith("Prefill")][:6]
    return Report(setup, lines, header, rows, log,
                  meaningless="Random weights never stop early, so the output lengths (and how "
                  "much the ratio over- or under-reserved) are not a model's, and the seconds are "
                  "CPU times; the bookkeeping that links the columns holds on any hardware.")


def retraction(setup: Setup) -> Report:
    """A pool too small for what admission bet on: requests are retracted, recomputed, and
    end with the tokens of a run that retracted nothing."""
    gpu = setup.on_gpu
    if gpu:
        n, max_new, pool, page, ids = 32, 384, 3072, 1, prompts(setup, 32, seed=5)
        opts = {"schedule_conservativeness": 0.3}
    else:  # the forcing workload of the tests: chunks, hits and a retraction in ~20 steps
        n, max_new, pool, page, ids = 4, 12, 96, 4, prompts(setup, 4, seed=1, length=(3, 20),
                                                             shared=8)
        opts = {"schedule_conservativeness": 0.05, "chunked_prefill_size": 16}
    eng = make_engine(setup, pool, page, **opts)
    warm_up(eng)
    res = eng.run(requests(ids, max_new))
    calm = make_engine(setup, pool * 16, page).run(requests(ids, max_new))
    assert calm.metrics.num_retractions == 0
    trace = res.trace
    same = [a == b for a, b in zip(res.outputs, calm.outputs, strict=True)]
    victims = [r for r in res.requests if r.num_retractions]
    t = np.diff(np.concatenate(([0.0], np.asarray(trace.steps["time_s"], dtype=float))))
    reprefill_steps = {e.step for e in trace.events_of("reprefill")}
    reprefill_s = float(sum(t[s] for s in reprefill_steps))
    held: dict[int, int] = {}  # KV tokens each victim held when retracted, and what the tree kept
    kept: dict[int, int] = {}
    for e in trace.events_of("retract"):
        held[e.rid] = held.get(e.rid, 0) + e.extra["freed"]
        kept[e.rid] = kept.get(e.rid, 0) + e.extra["kept"]
    # A re-prefill computes what the tree no longer held: the KV thrown away (recomputed_tokens)
    # plus, each time, the newest output token, whose KV no step had written yet. Counted from
    # the requests, not the trace's reprefill event, which gives only the first chunk's length.
    again = {r.rid: r.recomputed_tokens + r.num_retractions for r in victims}
    # What the tree still held when the victim came back: eviction may take some of what it
    # kept in between, starting with the retraction's own release_req, which evicts room for
    # the requests that stay (hence a #new_tokens_gained above the victim's own slots).
    still: dict[int, int] = {}
    for e in trace.events_of("reprefill"):
        still[e.rid] = still.get(e.rid, 0) + e.extra["cached"]
    reprefills = sum(r.num_retractions for r in victims)  # one re-prefill per retraction
    rows = [(r.rid, r.num_retractions, r.generated, held[r.rid], kept[r.rid], still[r.rid],
             again[r.rid], r.recomputed_tokens, "yes" if same[r.rid] else "no") for r in victims]
    kept_same = sum(same[r.rid] for r in victims)
    others = [r for r in res.requests if not r.num_retractions]
    lines = [
        setup.describe(),
        f"{n} requests, up to {max_new} new tokens each, a pool of {pool:,} tokens "
        f"(page size {page}), schedule_conservativeness {opts['schedule_conservativeness']} (a "
        f"bold admission). {plural(len(victims), 'request')} "
        f"{'was' if len(victims) == 1 else 'were'} retracted (the log line below was printed "
        f"{plural(res.metrics.retraction_events, 'time')}), holding {sum(held.values()):,} KV "
        f"tokens, of which the radix cache kept {sum(kept.values()):,} as cached prompt pages"
        + (f". Kept is not safe: by the time {'it was' if len(victims) == 1 else 'they were'} "
           f"admitted again the tree still held {sum(still.values()):,} of them, since eviction "
           f"had taken {sum(kept.values()) - sum(still.values()):,} to make room for the "
           "requests that stay, starting with the retraction's own `release_req` when the free "
           "list lacked that room (the log's #new_tokens_gained counts the slots the victims "
           "held outside the tree plus what that eviction freed). "
           if sum(still.values()) < sum(kept.values()) else
           ", and still held all of them when the victims were admitted again (the log's "
           "#new_tokens_gained counts the slots they held outside the tree, plus what "
           "`release_req` evicted for the requests that stay). ")
        + f"Admitted again, {'it' if len(victims) == 1 else 'they'} had "
        f"{sum(again.values()):,} tokens prefilled "
        "(prompt and output so far, minus what the radix cache still held): "
        f"{res.metrics.recomputed_tokens:,} tokens of KV computed a second time, and "
        + (f"at each of the {reprefills} re-prefills the newest output token"
           if reprefills != 1 else "at the one re-prefill the newest output token")
        + ", whose KV no step had written yet.",
        f"The re-prefills took {reprefill_s:.3f} s of the run's {res.metrics.duration_s:.2f} s.",
        f"Each output is compared with the same prompt served from a pool 16 times larger, where "
        f"nothing was retracted: {kept_same} of {len(victims)} retracted requests and "
        f"{sum(same[r.rid] for r in others)} of {len(others)} others produced exactly the same "
        "tokens.",
    ]
    if not all(same):
        lines.append("A difference, where there is one, comes from rounding: in 16-bit arithmetic "
                     "a token computed in a batch of a different shape can round differently, and "
                     "greedy decoding follows a near tie either way. In float32 on the CPU every "
                     "token matches.")
    header = ("request", "retractions", "output tokens", "KV held when retracted",
              "of it kept in the tree", "of that still in the tree when admitted again",
              "prefilled again", "of it recomputed KV", "same tokens")
    log = [line for line in trace.log if line.startswith("KV cache pool is full")][:5]
    return Report(setup, lines, header, rows, log,
                  meaningless="The re-prefill seconds are CPU times and mean nothing, and which "
                  "requests are retracted follows from output lengths a random model drew; that a "
                  "retraction costs time and never tokens holds on any hardware.")


#: The shared system prompt of :func:`prefix_cache` on a GPU, in tokens (chapter 8 quotes it).
GPU_SYSTEM_PROMPT_LEN = 1500


def prefix_cache(setup: Setup) -> Report:
    """One long shared system prompt, many short questions, the radix cache on and off:
    the prefill time it saves, measured."""
    gpu = setup.on_gpu
    n, shared, max_new, pool = ((32, GPU_SYSTEM_PROMPT_LEN, 32, 65_536) if gpu
                                else (6, 96, 3, 1024))
    ids = prompts(setup, n, seed=6, length=(6, 12), shared=shared)
    arrivals = [0.0] + [1e-6] * (n - 1)  # the first request is prefilled alone, then the rest
    rows, outs, prefill, computed = [], {}, {}, {}
    for cache in (True, False):
        # the normal loop, as chapter 8's other runs: the first prompt is in the tree when the
        # rest are admitted (the overlap loop would cache it only after launching their pass)
        eng = make_engine(setup, pool, radix_cache=cache, disable_overlap_schedule=True)
        warm_up(eng)
        res = eng.run(requests(ids, max_new, arrivals))
        cached = sum(r.cached_tokens for r in res.requests)
        computed[cache] = sum(r.prompt_len for r in res.requests) - cached
        prefill[cache] = step_seconds(res.trace, "prefill")
        outs[cache] = res.outputs
        rows.append(("on" if cache else "off", f"{computed[cache]:,}", f"{cached:,}",
                     f"{prefill[cache]:.3f}", f"{step_seconds(res.trace, 'decode'):.3f}",
                     f"{res.metrics.duration_s:.3f}"))
    common = _common_prefix(ids)
    same = sum(a == b for a, b in zip(outs[True], outs[False], strict=True))
    on, off = prefill[True], prefill[False]
    lines = [
        setup.describe(),
        f"{n} prompts share their first {common:,} tokens (a system prompt); each adds a short "
        f"question and gets up to {max_new} new tokens. The first arrives alone, the others just "
        f"after, so they find its prompt in the tree.",
        f"With the radix cache the model computed {computed[True]:,} prompt tokens instead of "
        f"{computed[False]:,}. {same} of {n} outputs are the same with and without it.",
    ]
    if not gpu:
        lines.append(f"The prefill times ({on:.3f} s with the cache, {off:.3f} s without) are "
                     "mostly Python overhead per pass on this tiny CPU model, not arithmetic, "
                     "so they need not show the saving: the seconds worth reading are a GPU's, "
                     "with a real model and a 1,500-token system prompt.")
    elif on < off:
        lines.append(f"Prefill took {on:.3f} s instead of {off:.3f} s: {off - on:.3f} s saved "
                     f"({off / on:.1f}x less prefill time).")
    else:
        lines.append(f"Prefill took {on:.3f} s with the cache and {off:.3f} s without: at this "
                     "size the saving is lost in the time each pass costs anyway.")
    header = ("radix cache", "prefill tokens computed", "tokens from the cache", "prefill s",
              "decode s", "total s")
    return Report(setup, lines, header, rows,
                  meaningless="The prefill seconds, and so the time saved, are CPU times and mean "
                  "nothing; the counts of tokens computed and found in the cache hold on any "
                  "hardware.")


def _common_prefix(ids: list[list[int]]) -> int:
    """Tokens every prompt starts with."""
    first, n = ids[0], 0
    while n < len(first) and all(len(p) > n and p[n] == first[n] for p in ids):
        n += 1
    return n
