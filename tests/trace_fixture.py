"""Hand-made traces in the exact ``Trace.to_dict()`` format, for the visualizer's tests.

A toy FCFS loop, not the product simulator (that lives in ``pagedkv.managers``): enough to
produce admissions, page growth, partial pages, finishes and retractions with known page ids,
quickly enough for property tests of the encoding.
"""

from __future__ import annotations

import random
from collections import deque
from typing import Any

CELL = 131_072  # Llama-3-8B, bf16: 128 KiB per token
WEIGHTS = 16_060_522_496
CARD = 85_520_809_984  # H100 80GB as nvidia-smi reports it (81559 MiB)


def toy_trace(
    *,
    num_pages: int,
    page_size: int,
    requests: list[tuple[int, int, int]],
    mem_fraction_static: float = 0.83,
    record_page_tables: bool = True,
    max_steps: int = 20_000,
) -> dict[str, Any]:
    """Run ``requests`` = ``[(arrival step, prompt tokens, output tokens)]`` on a toy pool.

    Stops after ``max_steps`` (a request larger than the pool would wait forever)."""
    p = page_size
    free = deque(range(1, num_pages + 1))
    waiting: list[dict] = []
    running: list[dict] = []
    cols = {k: [] for k in ("step", "time_s", "kind", "tokens_used", "tokens_reserved",
                            "tokens_free", "pages_used", "num_running", "num_waiting",
                            "new_token_ratio")}
    events: list[list] = []
    tables: list[list] = []
    ratio, step = 0.7, 0
    pending = sorted(((a, i, pr, out) for i, (a, pr, out) in enumerate(requests)))
    while (pending or waiting or running) and step < max_steps:
        while pending and pending[0][0] <= step:
            _, rid, prompt, out = pending.pop(0)
            waiting.append({"rid": f"r{rid}", "prompt": prompt, "out": out, "gen": 0, "pages": []})
        kind = "idle"
        reserve = sum(min(r["out"] - r["gen"], 4096) * ratio for r in running)
        head = waiting[0] if waiting else None
        if head and (head["prompt"] + head["gen"] + head["out"] - head["gen"]
                     < len(free) * p - reserve):
            need = -(-(head["prompt"] + head["gen"]) // p)
            head["pages"] = [free.popleft() for _ in range(need)]
            running.append(waiting.pop(0))
            events.append([step, "reprefill" if head["gen"] else "admit", head["rid"], None])
            kind = "prefill"
        elif running:
            kind = "decode"
            while sum((r["prompt"] + r["gen"]) % p == 0 for r in running) > len(free):
                victim = min(running, key=lambda r: (r["gen"], -r["prompt"]))
                running.remove(victim)
                free.extendleft(reversed(victim["pages"]))
                victim["pages"] = []
                waiting.insert(0, victim)
                events.append([step, "retract", victim["rid"], None])
                ratio = 0.5
            for r in running:
                if (r["prompt"] + r["gen"]) % p == 0:
                    r["pages"].append(free.popleft())
                r["gen"] += 1
            for r in [r for r in running if r["gen"] >= r["out"]]:
                running.remove(r)
                free.extendleft(reversed(r["pages"]))
                events.append([step, "finish", r["rid"], {"output_len": r["gen"]}])
            ratio = max(0.098, ratio - 0.001)
        used = sum(r["prompt"] + r["gen"] for r in running)
        reserved = int(sum(min(r["out"] - r["gen"], 4096) * ratio for r in running))
        for key, value in zip(cols, (step, step * 0.02, kind, used, reserved,
                                     num_pages * p - used - reserved, num_pages - len(free),
                                     len(running), len(waiting), ratio), strict=True):
            cols[key].append(value)
        if record_page_tables:
            tables.append([[r["rid"], r["prompt"] + r["gen"], list(r["pages"])] for r in running])
        step += 1
    max_tokens = num_pages * p
    return {
        "meta": {"model": "llama-3-8b", "gpu": "H100", "policy": "fcfs", "page_size": p,
                 "mem_fraction_static": mem_fraction_static, "max_total_num_tokens": max_tokens,
                 "cell_size": CELL, "num_pages": num_pages, "gpu_memory_bytes": CARD,
                 "weights_bytes": WEIGHTS, "kv_pool_bytes": max_tokens * CELL,
                 "arrival_rate": None},
        "steps": cols,
        "events": events,
        "page_tables": tables if record_page_tables else None,
        "log": [],
    }


def toy_requests(n: int, page_size: int, seed: int, spacing: int = 2) -> list[tuple[int, int, int]]:
    """``n`` requests a few pages long each, arriving every ``spacing`` steps."""
    rng = random.Random(seed)
    return [(i * spacing, max(1, round(rng.uniform(0.5, 4) * page_size)),
             max(1, round(rng.uniform(1, 3) * page_size))) for i in range(n)]
