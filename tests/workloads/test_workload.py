"""Seeded workloads: reproducible, well-formed, and shaped as documented."""

from __future__ import annotations

import numpy as np
import pytest

from pagedkv.errors import ConfigError
from pagedkv.workloads.synthetic import (
    SHAREGPT_MEAN_OUTPUT,
    SHAREGPT_MEAN_PROMPT,
    RequestSpec,
    fixed,
    sharegpt_like,
    to_arrays,
    uniform,
)


def test_fixed_and_fields() -> None:
    specs = fixed(3, prompt_len=10, output_len=5, max_new_tokens=8)
    assert specs[0] == RequestSpec(prompt_len=10, output_len=5, max_new_tokens=8, arrival_s=0.0)
    assert len(specs) == 3
    assert fixed(1, 10, 5)[0].max_new_tokens == 5


def test_same_seed_same_requests_and_ranges() -> None:
    a = uniform(200, (1, 50), (10, 400), max_new_tokens=256, rate=4.0, seed=7)
    assert a == uniform(200, (1, 50), (10, 400), max_new_tokens=256, rate=4.0, seed=7)
    cols = to_arrays(a)
    assert cols["prompt_len"].min() >= 1 and cols["prompt_len"].max() <= 50
    assert cols["output_len"].max() == 256  # clipped to max_new_tokens
    assert np.all(np.diff(cols["arrival_s"]) > 0)
    assert cols["arrival_s"][-1] == pytest.approx(200 / 4.0, rel=0.25)


def test_sharegpt_like_means_follow_the_paper() -> None:
    cols = to_arrays(sharegpt_like(20_000, max_new_tokens=4096, max_prompt_len=4096, seed=1))
    assert cols["prompt_len"].mean() == pytest.approx(SHAREGPT_MEAN_PROMPT, rel=0.05)
    assert cols["output_len"].mean() == pytest.approx(SHAREGPT_MEAN_OUTPUT, rel=0.05)
    assert cols["prompt_len"].min() >= 1


def test_errors() -> None:
    with pytest.raises(ConfigError, match=r"rate=0 is invalid; valid: requests per second > 0"):
        fixed(2, 3, 4, rate=0)
    with pytest.raises(ConfigError, match=r"prompt_range=\(5, 2\) is invalid"):
        uniform(2, (5, 2), (1, 2), 4)
    with pytest.raises(ConfigError, match=r"n=0 is invalid"):
        sharegpt_like(0)
    assert to_arrays([])["prompt_len"].shape == (0,)
