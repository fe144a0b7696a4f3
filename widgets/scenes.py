"""From visualizer settings to a scene: two simulator runs, encoded for the renderer.

Every setting of the controls (model, GPU, workload, ``mem_fraction_static``, page size)
runs ``pagedkv.scheduler.simulate`` twice:

- the *card* run, at the real scale of the chosen model on the chosen GPU, feeds the HBM bar
  and the timeline;
- the *pool* run, on a teaching pool small enough to read page by page, records page tables
  and feeds the page table and the pool map. The teaching pool applies the same
  ``mem_fraction_static`` to a toy card of :data:`TOY_CARD_PAGES` pages of which
  :data:`TOY_WEIGHT_PAGES` hold weights, so it has ``floor(f * 100) - 30`` pages
  (53 at f = 0.83): the slider moves both pools the same way.

The JavaScript never simulates; it looks scenes up by :func:`scene_keys` (static book) or
receives them from Python (live widget).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from pagedkv_widgets.encoding import encode_trace

TOY_CARD_PAGES = 100
TOY_WEIGHT_PAGES = 30
CARD_SAMPLES = 120  # timeline points kept from a real-scale run
POOL_SAMPLES = 300  # steps kept from a teaching run (each one is a frame of the page table)

Simulate = Callable[..., Any]


@dataclass(frozen=True)
class Settings:
    """One position of the controls. ``workload`` names an entry of ``WORKLOADS``."""

    model: str
    gpu: str
    workload: str
    mem_fraction_static: float
    page_size: int

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form, as the JavaScript holds it."""
        return asdict(self)


def scene_keys(s: Settings) -> dict[str, str]:
    """Grid keys of the two runs (the JavaScript ``sceneKeys`` builds the same strings).

    The teaching run does not depend on the model or GPU, so its key leaves them out.
    """
    f = f"{s.mem_fraction_static:.2f}"
    return {
        "card": f"{s.model}|{s.gpu}|{s.workload}|{f}|{s.page_size}",
        "pool": f"{s.workload}|{f}|{s.page_size}",
    }


def teaching_pages(mem_fraction_static: float) -> int:
    """Pages of the teaching pool: ``f`` of the toy card minus its weights, at least 4."""
    return max(4, math.floor(mem_fraction_static * TOY_CARD_PAGES + 1e-9) - TOY_WEIGHT_PAGES)


def default_simulate() -> Simulate:
    """``pagedkv.scheduler.simulate``, imported on first use."""
    from pagedkv.scheduler import simulate

    return simulate


@dataclass(frozen=True)
class SceneRunner:
    """Runs and encodes scenes. ``workloads`` maps a workload name to ``simulate``'s
    ``workload`` argument at card scale and at teaching scale."""

    simulate: Simulate
    workloads: dict[str, tuple[Any, Any]]
    teaching_model: str
    teaching_gpu: str

    def card(self, s: Settings) -> dict[str, Any]:
        """The real-scale run, encoded (no page tables)."""
        result = self.simulate(
            model=s.model, gpu=s.gpu, mem_fraction_static=s.mem_fraction_static,
            page_size=s.page_size, workload=self.workloads[s.workload][0],
            record_page_tables=False,
        )
        return encode_trace(result.trace.to_dict(), CARD_SAMPLES)

    def pool(self, s: Settings) -> dict[str, Any]:
        """The teaching-pool run, encoded with its page tables."""
        result = self.simulate(
            model=self.teaching_model, gpu=self.teaching_gpu,
            mem_fraction_static=s.mem_fraction_static, page_size=s.page_size,
            workload=self.workloads[s.workload][1], record_page_tables=True,
            max_total_tokens=teaching_pages(s.mem_fraction_static) * s.page_size,
        )
        return encode_trace(result.trace.to_dict(), POOL_SAMPLES)

    def run(self, part: str, s: Settings) -> dict[str, Any]:
        """``part`` is ``"card"`` or ``"pool"``."""
        return self.card(s) if part == "card" else self.pool(s)

    def scene(self, s: Settings, parts: set[str]) -> dict[str, Any]:
        """The runs in ``parts``: ``{"card": encoded trace or None, "pool": ... or None}``."""
        return {part: self.run(part, s) if part in parts else None for part in ("card", "pool")}


def runs_needed(views: list[str]) -> set[str]:
    """Which runs the given views draw from: the card run, the teaching-pool run, or both."""
    return {part for part, uses in (("card", {"hbm", "timeline"}), ("pool", {"pagetable", "pool"}))
            if uses & set(views)}
