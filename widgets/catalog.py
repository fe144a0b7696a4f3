"""The models, GPUs and workloads the visualizer offers, and the defaults it opens on."""

from __future__ import annotations

from pagedkv_widgets.chapters import Catalog
from pagedkv_widgets.scenes import SceneRunner, Settings, Simulate, default_simulate

CATALOG = Catalog(
    models={"llama-3-8b": "Llama-3-8B", "qwen3-4b": "Qwen3-4B"},
    gpus={"H100": "H100 80GB", "H200": "H200 141GB"},
    workloads={
        "steady": ("steady: 4 requests/s", "steady-card", "steady-teach"),
        "busy": ("busy: 16 requests/s", "busy-card", "busy-teach"),
        "burst": ("burst: all at once", "burst-card", "burst-teach"),
    },
    defaults=Settings(model="llama-3-8b", gpu="H100", workload="busy",
                      mem_fraction_static=0.85, page_size=16),
)


def make_runner(simulate: Simulate | None = None, catalog: Catalog = CATALOG) -> SceneRunner:
    """A scene runner over ``simulate`` (default: ``pagedkv.scheduler.simulate``)."""
    return SceneRunner(
        simulate=simulate or default_simulate(),
        workloads={name: (card, teach) for name, (_, card, teach) in catalog.workloads.items()},
        teaching_model=catalog.defaults.model,
        teaching_gpu=catalog.defaults.gpu,
    )
