"""The models, GPUs and workloads the visualizer offers, and the defaults it opens on."""

from __future__ import annotations

from pagedkv_widgets.chapters import Catalog
from pagedkv_widgets.scenes import SceneRunner, Settings, Simulate, Workload, default_simulate

CATALOG = Catalog(
    models={"llama-3-8b": "Llama-3-8B", "qwen3-4b": "Qwen3-4B"},
    gpus={"h100-sxm-80gb": "H100 SXM 80GB", "h200-141gb": "H200 141GB"},
    workloads={
        "steady": Workload("steady: 20 requests/s", rate=20.0, teaching_rate=25.0),
        "busy": Workload("busy: 80 requests/s", rate=80.0, teaching_rate=100.0),
        "burst": Workload("burst: all at once", rate=None, teaching_rate=None),
    },
    defaults=Settings(model="llama-3-8b", gpu="h100-sxm-80gb", workload="busy",
                      mem_fraction_static=0.85, page_size=16),
)


def make_runner(simulate: Simulate | None = None, catalog: Catalog = CATALOG) -> SceneRunner:
    """A scene runner over ``simulate`` (default: ``pagedkv.scheduler.simulate``)."""
    return SceneRunner(simulate=simulate or default_simulate(), workloads=catalog.workloads,
                       teaching_model=catalog.defaults.model,
                       teaching_gpu=catalog.defaults.gpu)
