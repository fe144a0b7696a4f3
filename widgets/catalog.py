"""The models, GPUs and workloads the visualizer offers, and the defaults it opens on.

The card-scale workloads are the book's running case (:data:`pagedkv.workloads.cases.LONG_ANSWERS`:
Qwen3-4B on an RTX 4090, log-normal answers, ``max_new_tokens`` = answer length). Every chapter
that plays the card-scale workloads runs them at the case's ``mem_fraction_static``, so the
case has one pool and one outcome wherever the book shows it. The admission, retraction and
full chapters open on that case at 2 requests/s, where the run over-admits and retracts; the
memory chapter opens on Llama-3-8B on an H100 at the same fraction, and its model and GPU menus
lead to the case. Chapter 9's (``"windows"``) opens on a sliding-window hybrid, gpt-oss-20b on
an H100; its ``"states"`` on a linear-attention hybrid, Qwen3-Next-80B-A3B on four H200s (one
GPU's share: ``tp``). Their menus offer the hybrids of their family (``hybrid_models``, the
tensor-parallel size in the label) on the H100 and the H200, and the busy and burst workloads
cut to their first :data:`HYBRID_REQUESTS` requests: a hybrid's run is recorded step by step.
"""

from __future__ import annotations

from dataclasses import replace

from pagedkv.configs.model_presets import MODEL_PRESETS
from pagedkv.gpus import get_gpu
from pagedkv.server_args import default_mem_fraction_static
from pagedkv.workloads.cases import LONG_ANSWERS
from pagedkv_widgets.chapters import STATE_MODELS, SWA_MODELS, Catalog
from pagedkv_widgets.run_cache import RunCache, default_folder
from pagedkv_widgets.scenes import SceneRunner, Settings, Simulate, Workload, default_simulate

# How the book names models (the Hugging Face repository's own spelling, without the owner's
# prefix on Llama and in Gemma's capitals); other presets fall back to the repository name.
MODEL_LABELS = {"llama-3-8b": "Llama-3-8B", "gemma-2-9b": "Gemma-2-9B"}


def model_label(name: str) -> str:
    """A model preset as readers know it: ``"qwen3-4b"`` -> ``"Qwen3-4B"``."""
    return MODEL_LABELS.get(name) or MODEL_PRESETS.get(name, name).split("/")[-1]


def menu_label(name: str) -> str:
    """A model as chapter 9's menus name it: :func:`model_label` without an instruction-tuned
    checkpoint's ``-Instruct``, with the tensor-parallel size of a model served on several
    GPUs (``"Qwen3-Next-80B-A3B, tp 4"``)."""
    tp = CATALOG_TP.get(name, 1)
    return model_label(name).removesuffix("-Instruct") + (f", tp {tp}" if tp != 1 else "")


def gpu_label(name: str) -> str:
    """A GPU preset as readers know it: ``"h100-sxm-80gb"`` -> ``"H100 SXM 80GB"``."""
    return get_gpu(name).label


_DEFAULTS = Settings(model="llama-3-8b", gpu="h100-sxm-80gb", workload="busy",
                     mem_fraction_static=0.85, page_size=16)
_CASE = replace(_DEFAULTS, model=LONG_ANSWERS.model, gpu=LONG_ANSWERS.gpu,
                mem_fraction_static=LONG_ANSWERS.mem_fraction_static)
# Chapter 9's runs: the first 40 requests of the busy and burst workloads. A hybrid's run is
# simulated and recorded step by step (1-12 CPU-s at 40 requests, about 3 times that at 120:
# the longest answer sets a burst's length), and its page holds ten or eleven runs per view.
HYBRID_REQUESTS = 40
# Chapter 9's sliding-window hybrid: gpt-oss-20b on an H100 at SGLang 0.5.23's default
# fraction for the card (its weights: the preset's checkpoint index), the whole workload at
# once (every request's window slides while its full row grows), in pages of 64 tokens: every
# step records both pools' owners page by page, so its runs at 16 take twice as long, and the
# page holds ten of them.
SWA_MODEL = "gpt-oss-20b"
_SWA = replace(_DEFAULTS, model=SWA_MODEL, gpu="h100-sxm-80gb", workload="burst-hybrid",
               mem_fraction_static=default_mem_fraction_static(get_gpu("h100-sxm-80gb").memory_mib),
               page_size=64)

# Chapter 9's linear-attention hybrid: Qwen3-Next-80B-A3B on four H200s (tp 4, one GPU's
# share shown), SGLang 0.5.23's default fraction for that setting, its default mamba radix
# cache; the whole workload at once (every request takes a state slot at admission).
STATE_MODEL, STATE_TP = "qwen3-next-80b-a3b", 4
# Four GPUs hold Qwen3-Next's weights with room for its KV and state pools on an H100 (two
# leave no room for the state pool there) as on an H200.
CATALOG_TP = {STATE_MODEL: STATE_TP}
_STATES = replace(_DEFAULTS, model=STATE_MODEL, gpu="h200-141gb", workload="burst-hybrid",
                  mem_fraction_static=default_mem_fraction_static(
                      get_gpu("h200-141gb").memory_mib, tp=STATE_TP))

CATALOG = Catalog(
    models={m: model_label(m) for m in ("llama-3-8b", "qwen3-4b")},
    gpus={g: gpu_label(g) for g in ("rtx-4090", "h100-sxm-80gb", "h200-141gb")},
    workloads={
        "calm": Workload(f"calm: {LONG_ANSWERS.calm_rate:g} requests/s", rate=LONG_ANSWERS.calm_rate,
                         teaching_rate=4.0),
        "busy": Workload(f"busy: {LONG_ANSWERS.busy_rate:g} requests/s", rate=LONG_ANSWERS.busy_rate,
                         teaching_rate=25.0),
        "burst": Workload("burst: all at once", rate=None, teaching_rate=None),
        "busy-hybrid": Workload(f"busy: {LONG_ANSWERS.busy_rate:g} requests/s, {HYBRID_REQUESTS} requests",
                                rate=LONG_ANSWERS.busy_rate, teaching_rate=None,
                                requests=HYBRID_REQUESTS),
        "burst-hybrid": Workload(f"burst: {HYBRID_REQUESTS} requests at once", rate=None,
                                 teaching_rate=None, requests=HYBRID_REQUESTS),
    },
    defaults=_DEFAULTS,
    chapter_defaults={"memory": replace(_DEFAULTS, mem_fraction_static=LONG_ANSWERS.mem_fraction_static),
                      "admission": _CASE, "retraction": _CASE, "full": _CASE, "windows": _SWA,
                      "states": _STATES},
    hybrid_models={m: menu_label(m) for m in (*SWA_MODELS, *STATE_MODELS)},
    tp=CATALOG_TP,
)


_SHARED: dict[int, SceneRunner] = {}


def make_runner(simulate: Simulate | None = None, catalog: Catalog = CATALOG) -> SceneRunner:
    """A scene runner over ``simulate`` (default: ``pagedkv.entrypoints.simulate``). Without
    ``simulate`` every call in a process gets the same runner, so a chapter's text and its
    visualizer read the same (memoised) runs, kept on disk too (:mod:`pagedkv_widgets.run_cache`:
    the next chapter, build or session reads them from there)."""
    if simulate is None and id(catalog) in _SHARED:
        return _SHARED[id(catalog)]
    folder = default_folder() if simulate is None else None
    runner = SceneRunner(simulate=simulate or default_simulate(), workloads=catalog.workloads,
                         teaching_model=catalog.defaults.model,
                         teaching_gpu=catalog.defaults.gpu, tp=dict(catalog.tp),
                         cache=None if folder is None else RunCache(folder))
    if simulate is None:
        _SHARED[id(catalog)] = runner
    return runner
