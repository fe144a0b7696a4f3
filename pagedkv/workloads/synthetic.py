"""Seeded request generators: fixed, uniform and ShareGPT-like lengths, Poisson arrivals.

Every generator takes a ``seed`` and draws from ``numpy.random.default_rng(seed)``, so the
same call gives the same requests on every machine; the book's numbers depend on that.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pagedkv.errors import bad_value, check_positive_int

# vLLM paper (Kwon et al., SOSP 2023), Fig. 11a: ShareGPT has 8.4x longer inputs and 5.8x
# longer outputs than Alpaca; mean input 161.31 tokens, mean output 337.99 tokens.
SHAREGPT_MEAN_PROMPT = 161.31
SHAREGPT_MEAN_OUTPUT = 337.99
SHAREGPT_SIGMA = 1.0  # our choice: a heavy right tail like Fig. 11a, not fitted to the data


@dataclass(frozen=True)
class RequestSpec:
    """One request as the scheduler sees it.

    Attributes:
        prompt_len: prompt tokens (>= 1).
        output_len: tokens the request really generates before it stops (>= 1,
            <= ``max_new_tokens``); unknown to the server until it happens.
        max_new_tokens: the cap the client sent (SGLang's sampling param of that name).
        arrival_s: arrival time in seconds from the start of the run.
        input_ids: the prompt's token ids (``prompt_len`` of them), or None: made-up ids
            that no other request shares. A prefix cache can only match real ids.
        output_ids: the tokens it will generate, when a later request resends them (a next
            turn); None: made-up ids.
        follows: index of the request that must finish before this one arrives (the
            previous turn of the same conversation), or None.
        ignore_eos: the client asked to ignore EOS (it runs to ``max_new_tokens``).
    """

    prompt_len: int
    output_len: int
    max_new_tokens: int
    arrival_s: float = 0.0
    input_ids: tuple[int, ...] | None = None
    output_ids: tuple[int, ...] | None = None
    follows: int | None = None
    ignore_eos: bool = False


def arrivals(n: int, rate: float | None, rng: np.random.Generator) -> np.ndarray:
    """float64 ``[n]`` arrival times in seconds: a Poisson process of ``rate`` requests/s
    (exponential gaps, first gap included), or all zeros when ``rate`` is None."""
    if rate is None:
        return np.zeros(n)
    if not rate > 0:
        raise bad_value("rate", rate, "requests per second > 0, or None for all at t=0")
    return np.cumsum(rng.exponential(1.0 / rate, size=n))


def _specs(prompt: np.ndarray, output: np.ndarray, max_new_tokens: int,
           arrive: np.ndarray) -> list[RequestSpec]:
    output = np.minimum(output, max_new_tokens)
    return [RequestSpec(int(p), int(o), max_new_tokens, float(t))
            for p, o, t in zip(prompt, output, arrive, strict=True)]


def fixed(n: int, prompt_len: int, output_len: int, max_new_tokens: int | None = None,
          rate: float | None = None, seed: int = 0) -> list[RequestSpec]:
    """``n`` identical requests (``max_new_tokens`` defaults to ``output_len``)."""
    check_positive_int("n", n)
    cap = check_positive_int("max_new_tokens", max_new_tokens or output_len)
    ones = np.ones(n, dtype=np.int64)
    rng = np.random.default_rng(seed)
    return _specs(ones * check_positive_int("prompt_len", prompt_len),
                  ones * check_positive_int("output_len", output_len), cap,
                  arrivals(n, rate, rng))


def uniform(n: int, prompt_range: tuple[int, int], output_range: tuple[int, int],
            max_new_tokens: int, rate: float | None = None, seed: int = 0) -> list[RequestSpec]:
    """Lengths uniform on the inclusive ranges; outputs clipped to ``max_new_tokens``."""
    check_positive_int("n", n)
    for name, (lo, hi) in (("prompt_range", prompt_range), ("output_range", output_range)):
        if not 1 <= lo <= hi:
            raise bad_value(name, (lo, hi), "(lo, hi) with 1 <= lo <= hi")
    rng = np.random.default_rng(seed)
    prompt = rng.integers(prompt_range[0], prompt_range[1] + 1, size=n)
    output = rng.integers(output_range[0], output_range[1] + 1, size=n)
    return _specs(prompt, output, check_positive_int("max_new_tokens", max_new_tokens),
                  arrivals(n, rate, rng))


def lognormal_lengths(n: int, mean: float, sigma: float, max_len: int,
                      rng: np.random.Generator) -> np.ndarray:
    """int64 ``[n]`` log-normal lengths with the given mean (before clipping to [1, max_len]).

    ``mu = ln(mean) - sigma^2 / 2`` makes ``E[exp(N(mu, sigma^2))] = mean``.
    """
    mu = np.log(mean) - sigma**2 / 2
    return np.clip(np.rint(rng.lognormal(mu, sigma, size=n)), 1, max_len).astype(np.int64)


def sharegpt_like(n: int, max_new_tokens: int = 2048, rate: float | None = None,
                  max_prompt_len: int = 2048, seed: int = 0) -> list[RequestSpec]:
    """Lengths shaped like ShareGPT conversations: a log-normal FIT, not the data.

    Means come from the vLLM paper's ShareGPT statistics (Kwon et al., SOSP 2023, Fig. 11a:
    mean input 161.31, mean output 337.99 tokens). The spread ``sigma = 1.0`` is our choice
    to give the long right tail the figure shows. Prompts are clipped to
    ``[1, max_prompt_len]`` and outputs to ``[1, max_new_tokens]``, which lowers the means
    slightly.
    """
    check_positive_int("n", n)
    rng = np.random.default_rng(seed)
    prompt = lognormal_lengths(n, SHAREGPT_MEAN_PROMPT, SHAREGPT_SIGMA,
                               check_positive_int("max_prompt_len", max_prompt_len), rng)
    output = lognormal_lengths(n, SHAREGPT_MEAN_OUTPUT, SHAREGPT_SIGMA,
                               check_positive_int("max_new_tokens", max_new_tokens), rng)
    return _specs(prompt, output, max_new_tokens, arrivals(n, rate, rng))


def to_arrays(specs: list[RequestSpec]) -> dict[str, np.ndarray]:
    """Column arrays keyed by field name: int64 lengths, float64 ``arrival_s``."""
    names = ("prompt_len", "output_len", "max_new_tokens", "arrival_s")
    cols = [[getattr(s, n) for s in specs] for n in names]
    return {name: np.asarray(col, dtype=np.float64 if name == "arrival_s" else np.int64)
            for name, col in zip(names, cols, strict=True)}
