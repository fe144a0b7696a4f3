"""The HBM budget explorer of chapter 1: a stacked bar of one GPU's memory with four controls.

Python computes every combination of the controls with :func:`pagedkv.sizing.plan_pool`
(models x GPUs x ``mem_fraction_static`` x context lengths) into a compact table; the page's
JavaScript only looks the current combination up and redraws the bar with plotly. So the
controls work in the static HTML book (no kernel) and in Jupyter alike, and no formula is
written twice.
"""

from __future__ import annotations

import itertools
import json
import os
import uuid
from collections.abc import Sequence
from importlib import resources

from IPython.display import HTML

from pagedkv.configs.model_presets import load_model
from pagedkv.errors import PagedKVError
from pagedkv.gpus import get_gpu
from pagedkv.releases import DEFAULT_SGLANG_VERSION, SGLANG_VERSIONS
from pagedkv.server_args import default_mem_fraction_static
from pagedkv.sizing import plan_pool
from pagedkv.units import GiB
from pagedkv_widgets.catalog import gpu_label, model_label

#: Set by the book's Sphinx extension; then plotly.js is on the page already.
BOOK_BUILD_ENV = "PAGEDKV_BOOK_BUILD"
CAPTION = ("One GPU's memory as a bar in GiB: the model's weights, the reserve that "
           "1 - mem_fraction_static keeps for activations and CUDA graphs, and the KV pool, "
           "for the chosen model, GPU, mem_fraction_static and context length; the line under "
           "it turns the pool into tokens and requests.")


def budget_table(
    models: Sequence[str], gpus: Sequence[str], fractions: Sequence[float], contexts: Sequence[int]
) -> dict[str, list[float] | str | None]:
    """Every combination's bar, keyed ``"model|gpu|fraction|context"``.

    Value: ``[weights, activation_reserve, pool, max_total_num_tokens, B_max]``, the first
    three in GiB; None where the weights do not fit; ``"context"`` where the context is longer
    than the model's own. With a GPU preset the three sum to the card (up to the pool's
    rounding to whole tokens): ``pool = f * HBM - weights``.
    """
    table: dict[str, list[float] | str | None] = {}
    for m, g, f in itertools.product(models, gpus, fractions):
        model, gpu = load_model(m), get_gpu(g)
        for c in contexts:
            key = f"{m}|{g}|{f:.3f}|{c}"
            if c > model.context_len:
                table[key] = "context"
                continue
            try:
                plan = plan_pool(model, gpu=gpu, mem_fraction_static=f, context_len=c)
            except PagedKVError:
                table[key] = None
                continue
            reserve = (1 - f) * gpu.memory_bytes
            table[key] = [round(x / GiB, 3) for x in (plan.weights_bytes, reserve, plan.pool_bytes)]
            table[key] += [plan.max_total_num_tokens, plan.batch_cap]
    return table


def budget_explorer(
    models: Sequence[str] = ("llama-3-8b", "llama-3.1-8b", "qwen3-4b", "mistral-7b-v0.3", "gemma-2-9b"),
    gpus: Sequence[str] = ("h100-sxm-80gb", "h200-141gb", "a100-80gb", "a100-40gb", "l4", "rtx-4090"),
    fractions: Sequence[float] = (0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95),
    contexts: Sequence[int] = (4096, 8192, 32768, 131072),
    initial: tuple[str, str, float | None, int] = ("llama-3-8b", "h100-sxm-80gb", None, 8192),
) -> HTML:
    """An HTML output: selectors for model and GPU, sliders for fraction and context, the
    bar, a readout and a caption. Models and GPUs show by name, the ids stay in the data.

    The fraction slider also stops at SGLang's own defaults for the first GPU (0.5.23's and
    0.5.9's), and opens on the release the book follows (``initial``'s fraction None).

    Raises:
        ConfigError: an unknown model or GPU name.
    """
    card = get_gpu(initial[1]).memory_mib
    defaults = {v: default_mem_fraction_static(card, sglang_version=v) for v in SGLANG_VERSIONS}
    fractions = sorted({round(f, 3) for f in (*fractions, *defaults.values())})
    start = defaults[DEFAULT_SGLANG_VERSION]
    initial = (initial[0], initial[1], start if initial[2] is None else initial[2], initial[3])
    table = budget_table(models, gpus, fractions, contexts)
    spec = {
        "models": list(models), "gpus": list(gpus), "fractions": [f"{f:.3f}" for f in fractions],
        "contexts": list(contexts), "initial": [initial[0], initial[1], f"{initial[2]:.3f}", initial[3]],
        "table": table, "labels": {**{m: model_label(m) for m in models},
                                   **{g: gpu_label(g) for g in gpus}},
    }
    script = resources.files("pagedkv_widgets").joinpath("static/budget.js").read_text()
    plotly = ""
    if not os.environ.get(BOOK_BUILD_ENV):  # live Jupyter: bring plotly.js along
        from plotly.offline import get_plotlyjs

        plotly = f"<script>{get_plotlyjs()}</script>"
    uid = f"budget-{uuid.uuid4().hex[:8]}"
    return HTML(
        f'{plotly}<figure class="pkv-figure"><div class="pagedkv-budget" id="{uid}"></div>'
        f"<figcaption>{CAPTION}</figcaption></figure>"
        f'<script type="application/json" id="{uid}-data">{json.dumps(spec, separators=(",", ":"))}</script>'
        f"<script>{script}\npagedkvBudget('{uid}');</script>"
    )
