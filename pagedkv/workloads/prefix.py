"""Seeded request streams that share prefixes, as token ids: the inputs of prefix caching.

The scheduler's workloads (:mod:`pagedkv.workloads.synthetic`) carry only lengths; a prefix cache needs
the tokens themselves, because it reuses K/V only where two requests have the same token ids.
Token ids are drawn from ``numpy.random.default_rng(seed)`` in ``[0, VOCAB)``, so two random
runs of even a few tokens practically never collide; sharing comes only from the shapes
below, as in real traffic:

- :func:`shared_system_prompt`: every request starts with one system prompt (a chat product,
  an agent's tool list).
- :func:`multi_turn`: each turn of a conversation resends the whole conversation so far plus
  a new message; turn ``t + 1`` may start only after turn ``t`` has answered.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pagedkv.errors import bad_value, check_positive_int
from pagedkv.workloads.synthetic import RequestSpec, arrivals

VOCAB = 128_256  # Llama-3's vocabulary size; any large number would do


@dataclass(frozen=True)
class PrefixRequest:
    """One request with its tokens.

    Attributes:
        rid: request id, its index in the stream.
        input_ids: prompt token ids (SGLang's ``origin_input_ids``).
        output_ids: the tokens it will generate (known here so that a later turn can resend
            them; the server learns them one decode step at a time).
        follows: rid of the request that must finish before this one may start (the
            previous turn of the same conversation), or None.
    """

    rid: int
    input_ids: tuple[int, ...]
    output_ids: tuple[int, ...]
    follows: int | None = None

    def __post_init__(self) -> None:
        if not self.input_ids or not self.output_ids:
            raise bad_value(f"request {self.rid} (len(input_ids), len(output_ids))",
                            (len(self.input_ids), len(self.output_ids)), "both >= 1")


def _tokens(rng: np.random.Generator, n: int) -> tuple[int, ...]:
    return tuple(int(t) for t in rng.integers(0, VOCAB, size=n))


def _check_range(name: str, lo_hi: tuple[int, int]) -> tuple[int, int]:
    if not (isinstance(lo_hi, tuple) and len(lo_hi) == 2):
        raise bad_value(name, lo_hi, "a (lo, hi) pair of integers with 1 <= lo <= hi")
    lo, hi = lo_hi
    if not (isinstance(lo, int) and isinstance(hi, int) and 1 <= lo <= hi):
        raise bad_value(name, lo_hi, "(lo, hi) integers with 1 <= lo <= hi")
    return lo, hi


def shared_system_prompt(n: int, system_len: int, question_len: tuple[int, int],
                         output_len: tuple[int, int], seed: int = 0) -> list[PrefixRequest]:
    """``n`` requests: one ``system_len``-token system prompt, then a question of its own.

    Question and answer lengths are uniform on the inclusive ranges.
    """
    check_positive_int("n", n)
    rng = np.random.default_rng(seed)
    system = _tokens(rng, check_positive_int("system_len", system_len))
    q_lo, q_hi = _check_range("question_len", question_len)
    o_lo, o_hi = _check_range("output_len", output_len)
    return [PrefixRequest(i, system + _tokens(rng, int(rng.integers(q_lo, q_hi + 1))),
                          _tokens(rng, int(rng.integers(o_lo, o_hi + 1))))
            for i in range(n)]


def multi_turn(conversations: int, turns: int, message_len: tuple[int, int],
               output_len: tuple[int, int], system_len: int = 0,
               seed: int = 0) -> list[PrefixRequest]:
    """``conversations`` chats of ``turns`` turns each, listed turn by turn (all first turns,
    then all second turns, ...), the order in which a busy server would see them.

    Turn ``t + 1``'s prompt is turn ``t``'s prompt + its answer + a new user message, so it
    repeats everything before. With ``system_len > 0`` every chat opens with the same system
    prompt as well.
    """
    check_positive_int("conversations", conversations)
    check_positive_int("turns", turns)
    check_positive_int("system_len", system_len, minimum=0)
    m_lo, m_hi = _check_range("message_len", message_len)
    o_lo, o_hi = _check_range("output_len", output_len)
    rng = np.random.default_rng(seed)
    system = _tokens(rng, system_len)
    history = [system] * conversations
    last: list[int | None] = [None] * conversations
    out: list[PrefixRequest] = []
    for _ in range(turns):
        for c in range(conversations):
            prompt = history[c] + _tokens(rng, int(rng.integers(m_lo, m_hi + 1)))
            req = PrefixRequest(len(out), prompt, _tokens(rng, int(rng.integers(o_lo, o_hi + 1))),
                                follows=last[c])
            out.append(req)
            history[c], last[c] = prompt + req.output_ids, req.rid
    return out


def as_specs(reqs: list[PrefixRequest], max_new_tokens: int | None = None,
             rate: float | None = None, seed: int = 0) -> list[RequestSpec]:
    """The scheduler's workload entries for ``reqs``, token ids and turn order kept.

    ``max_new_tokens`` is the cap every client sends (default: each request's true output
    length, a client that knows its answer's length); it must cover every output. Arrivals
    are a Poisson process at ``rate`` requests/s, or all at t=0 (a later turn still waits for
    the turn before it).

    Raises:
        ConfigError: ``max_new_tokens`` shorter than an output, or a bad ``rate``.
    """
    longest = max((len(r.output_ids) for r in reqs), default=1)
    if max_new_tokens is not None and (isinstance(max_new_tokens, bool) or
                                       not isinstance(max_new_tokens, int) or max_new_tokens < longest):
        raise bad_value("max_new_tokens", max_new_tokens, f"None or an integer >= {longest} "
                        "(the longest output)")
    times = arrivals(len(reqs), rate, np.random.default_rng(seed))
    return [RequestSpec(len(r.input_ids), len(r.output_ids), max_new_tokens or len(r.output_ids),
                        float(t), r.input_ids, r.output_ids, r.follows)
            for r, t in zip(reqs, times, strict=True)]


def with_system_prompt(specs: list[RequestSpec], system_len: int, seed: int = 0) -> list[RequestSpec]:
    """``specs`` with one shared ``system_len``-token system prompt in front of each prompt
    (``prompt_len`` grows by ``system_len``); the rest of each prompt is drawn at random, so
    requests share exactly the system prompt. Token ids are int64 arrays (compact for large
    workloads)."""
    check_positive_int("system_len", system_len)
    rng = np.random.default_rng(seed)
    system = rng.integers(0, VOCAB, system_len, dtype=np.int64)
    return [RequestSpec(s.prompt_len + system_len, s.output_len, s.max_new_tokens, s.arrival_s,
                        np.concatenate((system, rng.integers(0, VOCAB, s.prompt_len, dtype=np.int64))),
                        s.output_ids, s.follows, s.ignore_eos)
            for s in specs]
