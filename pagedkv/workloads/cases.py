"""The book's running case: a Qwen3-4B service with long answers on one RTX 4090.

The book comes back to one setting (the chapters whose visualizer opens on it are
``pagedkv_widgets.facts.running_case_chapters()``), so every number it quotes about the case
is computed from :data:`LONG_ANSWERS` and nowhere else: the model and card, the
``mem_fraction_static`` the book chose for it, and the shape of its traffic (120 requests,
prompts around 386 tokens, answers with a median of 2,340 tokens and a long tail capped at
10,540, ``max_new_tokens`` equal to each answer's length, Poisson arrivals). The traffic is
the book's own example of a long-form chat service, not a measurement.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pagedkv.errors import check_positive_int
from pagedkv.gpus import get_gpu
from pagedkv.releases import DEFAULT_SGLANG_VERSION
from pagedkv.server_args import default_mem_fraction_static
from pagedkv.sizing import KVPoolPlan, plan_pool
from pagedkv.workloads.synthetic import RequestSpec, arrivals, lognormal_lengths


@dataclass(frozen=True)
class ServiceCase:
    """A model on a card at a chosen ``mem_fraction_static``, and the shape of its traffic.

    Attributes:
        model, gpu: presets (:func:`pagedkv.configs.model_presets.load_model`, :func:`pagedkv.gpus.get_gpu`).
        mem_fraction_static: the book's setting for this case (not SGLang's default; see
            :meth:`sglang_default`).
        requests: requests per run.
        prompt_mean, prompt_sigma: log-normal prompt lengths, tokens (mean before clipping).
        output_median, output_sigma, output_cap: log-normal answer lengths, tokens.
        busy_rate, calm_rate: the two arrival rates the chapters compare, requests/s.
    """

    model: str
    gpu: str
    mem_fraction_static: float
    requests: int
    prompt_mean: float
    prompt_sigma: float
    output_median: float
    output_sigma: float
    output_cap: int
    busy_rate: float
    calm_rate: float

    def workload(self, rate: float | None, seed: int, n: int | None = None) -> list[RequestSpec]:
        """``n`` (default :attr:`requests`) seeded requests arriving at ``rate`` requests/s
        (None: all at t = 0), ``max_new_tokens`` = each answer's length.

        Raises:
            ConfigError: ``n`` < 1 or ``rate`` <= 0.
        """
        n = self.requests if n is None else check_positive_int("n", n)
        rng = np.random.default_rng(seed)
        prompts = lognormal_lengths(n, self.prompt_mean, self.prompt_sigma, 4096, rng)
        # the log-normal mean whose median is output_median: exp(mu + sigma^2 / 2)
        outputs = lognormal_lengths(n, self.output_median * np.exp(self.output_sigma**2 / 2),
                                    self.output_sigma, self.output_cap, rng)
        return [RequestSpec(int(p), int(o), int(o), float(t))
                for p, o, t in zip(prompts, outputs, arrivals(n, rate, rng), strict=True)]

    def plan(self, page_size: int = 1, sglang_version: str = DEFAULT_SGLANG_VERSION) -> KVPoolPlan:
        """The pool at the case's ``mem_fraction_static``, rounded to ``page_size``."""
        return plan_pool(self.model, gpu=self.gpu, mem_fraction_static=self.mem_fraction_static,
                         page_size=page_size, sglang_version=sglang_version)

    def sglang_default(self, sglang_version: str = DEFAULT_SGLANG_VERSION) -> float:
        """SGLang's own default ``mem_fraction_static`` for the card, for comparison."""
        return default_mem_fraction_static(get_gpu(self.gpu).memory_mib,
                                           sglang_version=sglang_version)


# 0.80: between 0.5.23's default for a 4090 (0.704, which leaves a pool too small for the
# burst to be interesting) and 0.5.9's (0.847); chapter 7 lets the reader move it.
LONG_ANSWERS = ServiceCase(model="qwen3-4b", gpu="rtx-4090", mem_fraction_static=0.80,
                           requests=120, prompt_mean=386.0, prompt_sigma=0.1,
                           output_median=2340.0, output_sigma=0.63, output_cap=10_540,
                           busy_rate=2.0, calm_rate=0.35)
