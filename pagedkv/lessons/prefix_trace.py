"""What a prefix-cache run records: the pool's split after every step, and per-request hits.

Filled by :class:`pagedkv.lessons.prefix_serving.PrefixServer`; read by chapter 8's tables and figures.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ServeStep:
    """The pool after one step, in slots (tokens).

    ``free + running + protected + evictable == size``; ``running`` counts the slots of
    running requests outside the tree, partial-page tails included.
    """

    step: int
    kind: str  # "prefill" or "decode"
    running_reqs: int
    finished_reqs: int
    free: int
    running: int
    protected: int
    evictable: int
    computed: int  # prompt tokens prefilled this step (0 on decode steps)
    reused: int  # prompt tokens served from the tree this step (SGLang's #cached-token)
    evicted: int


@dataclass(frozen=True)
class ServeResult:
    """Every step's :class:`ServeStep`, per-request prefix hits, and the run's settings."""

    steps: list[ServeStep]
    prompt_lens: list[int]
    hit_lens: list[int]  # prompt tokens matched in the tree at admission, per rid
    size: int
    page_size: int
    radix: bool

    @property
    def prompt_tokens(self) -> int:
        return sum(self.prompt_lens)

    @property
    def reused_tokens(self) -> int:
        return sum(self.hit_lens)

    @property
    def hit_rate(self) -> float:
        """Share of all prompt tokens served from the cache instead of computed (0 for a run
        without prompts)."""
        return self.reused_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def max_running_reqs(self) -> int:
        """The most requests that ran at once."""
        return max((s.running_reqs for s in self.steps), default=0)

    @property
    def peak_held(self) -> int:
        """The most slots running requests held at once (their own plus locked tree slots)."""
        return max((s.running + s.protected for s in self.steps), default=0)
