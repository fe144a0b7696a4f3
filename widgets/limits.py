"""Why a visualizer setting cannot run, in plain words, and which control value would.

A run fails at one of two of SGLang's limits:

- the weights: ``mem_fraction_static`` of the card must hold the weights and leave a KV pool
  (``model_runner.profile_max_num_token``; SGLang stops at start-up with "Not enough
  memory"), which :func:`pagedkv.sizing.plan_pool` checks;
- the longest prompt: SGLang refuses a prompt of ``max_req_input_len`` tokens or more
  (``min(context_len, pool) - 7`` accepted at most; ``pagedkv.sizing.max_req_input_len``), as
  ``pagedkv.managers.scheduler.Scheduler`` does. A ``max_new_tokens`` too large for the pool
  is not a limit: both releases clamp it at arrival.

:func:`problem` tests both without simulating (the plan and the requests only), so a search
over the sliders' other positions for one that runs costs milliseconds.
:func:`explained` replaces a failed run's exception text with the limit in words and the
nearest control values that work; both the static grid and the live widget use it, and the
renderer shows the two lines and greys out the views of that run.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace
from typing import Any

from pagedkv.configs.model_presets import load_model
from pagedkv.errors import NotEnoughMemoryError
from pagedkv.gpus import get_gpu
from pagedkv.sizing import max_req_input_len
from pagedkv.units import fmt_gib
from pagedkv_widgets.scenes import SceneRunner, Settings


def fraction_text(f: float) -> str:
    """A ``mem_fraction_static`` as SGLang prints it: two decimals, three where it has them
    (its default 0.897; the renderer's ``fraction`` is its twin)."""
    return f"{f:.3f}" if abs(f * 100 - round(f * 100)) > 1e-6 else f"{f:.2f}"


def _label(config: dict[str, Any], axis: str, value: Any) -> str:
    """A model's or GPU's name as the controls show it."""
    return next((label for v, label in config["axes"].get(axis, []) if v == value), str(value))


def problem(runner: SceneRunner, part: str, s: Settings, config: dict[str, Any]) -> str | None:
    """The limit that stops run ``part`` (``"card"`` or ``"pool"``) at ``s``, in words; None
    if both limits hold."""
    model = runner.teaching_model if part == "pool" else s.model
    gpu = runner.teaching_gpu if part == "pool" else s.gpu
    try:
        plan, requests = runner.setup(part, s)
    except NotEnoughMemoryError:
        card, weights = get_gpu(gpu), load_model(model).weight_bytes()
        keep = s.mem_fraction_static * card.memory_bytes
        return (f"{_label(config, 'model', model)}'s weights take {fmt_gib(weights)}, but "
                f"mem_fraction_static {fraction_text(s.mem_fraction_static)} keeps {fmt_gib(keep)} of the "
                f"{_label(config, 'gpu', gpu)}'s {fmt_gib(card.memory_bytes)} for weights and KV "
                "cache together: nothing is left for a KV pool, and SGLang stops at start-up "
                "(\"Not enough memory\").")
    page = s.page_size
    pool = plan.max_total_num_tokens
    limit = max_req_input_len(pool, load_model(model).context_len)
    longest = max(r.prompt_len for r in requests)
    if longest < limit:
        return None
    which = "teaching pool" if part == "pool" else "KV pool"
    return (f"The {which} holds {pool:,} tokens ({pool // page:,} pages of {page}); the longest "
            f"prompt has {longest:,} tokens, and SGLang refuses a prompt of max_req_input_len = "
            f"{limit:,} tokens or more (min(context length, pool) - 7 is the longest it accepts).")


def _nearest(values: list[Any], current: Any, works: Any, upward: bool) -> Any | None:
    """The value nearest ``current`` on the side that relieves the limit, that works."""
    side = [v for v in values if (v > current if upward else v < current)]
    return next((v for v in sorted(side, reverse=not upward) if works(v)), None)


def fix(runner: SceneRunner, part: str, s: Settings, config: dict[str, Any],
        held: Collection[Settings] | None = None) -> str:
    """Control values the reader can pick that make run ``part`` work, nearest first; with
    ``held`` (the settings a static page precomputed), only changes that land on one, if
    any does."""
    controls = config["controls"]

    def keys(axis: str) -> list[Any]:
        return [v[0] if isinstance(v, list) else v for v in config["axes"][axis]]

    def works(**change: Any) -> bool:
        moved = replace(s, **change)
        return (held is None or moved in held) and problem(runner, part, moved, config) is None

    tries = []
    if "mem_fraction_static" in controls:
        f = _nearest(keys("mem_fraction_static"), s.mem_fraction_static,
                     lambda v: works(mem_fraction_static=v), upward=True)
        if f is not None:
            tries.append(f"mem_fraction_static {fraction_text(f)} or more")
    if part == "pool" and "page_size" in controls:
        p = _nearest(keys("page_size"), s.page_size, lambda v: works(page_size=v), upward=False)
        if p is not None:
            tries.append(f"page size {p} or less")
    if part == "card" and "gpu" in controls:
        gpus = [g for g in keys("gpu") if g != s.gpu and works(gpu=g)]
        if gpus:
            tries.append("the " + " or the ".join(_label(config, "gpu", g) for g in gpus))
    if part == "card" and "model" in controls:
        models = [m for m in keys("model") if m != s.model and works(model=m)]
        if models:
            tries.append(" or ".join(_label(config, "model", m) for m in models))
    if not tries and held is not None:  # none in one move: any that works, the page moves there
        return fix(runner, part, s, config)
    if not tries:
        return "No position of these controls makes it fit."
    return "Try " + (", or ".join(tries)) + "."


def explained(run: dict[str, Any], runner: SceneRunner, part: str, s: Settings,
              config: dict[str, Any], held: Collection[Settings] | None = None) -> dict[str, Any]:
    """``run`` itself if it ran; else ``{"error": the limit in words, "fix": what works}``.

    A failure that neither limit explains keeps the simulator's own message (which names
    the parameter, its value and the valid range). ``held``: as for :func:`fix`.
    """
    if "error" not in run:
        return run
    why = problem(runner, part, s, config)
    return {"error": why or f"This setting cannot run: {run['error']}",
            "fix": fix(runner, part, s, config, held) if why else ""}
