"""Parts of the scheduler, each a typed dataclass that names what it uses, as SGLang 0.5.23
lays them out (``python/sglang/srt/managers/scheduler_components/``)."""

from pagedkv.managers.scheduler_components.new_token_ratio_tracker import NewTokenRatioTracker

__all__ = ["NewTokenRatioTracker"]
