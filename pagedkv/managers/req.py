"""One request: its tokens, its place in the pool and the tree, and what happened to it.

Follows SGLang's ``Req`` (``python/sglang/srt/managers/schedule_batch.py``; in 0.5.23 the KV
fields live in ``ReqKvInfo`` beside it). SGLang keeps ``Req`` and ``ScheduleBatch`` in one
file; here they are two, to keep each module to one job.

Token bookkeeping, as in SGLang: a prefill writes the KV of every token it is given and
samples one new token, so after a prefill over ``prompt_len + generated`` tokens the request
has ``generated + 1`` output tokens. Each decode step writes the KV of the newest token and
samples the next. The last sampled token's KV is never written, so a running request holds
``kv_committed_len = prompt_len + generated - 1`` tokens of KV.

Token ids. A prefix cache matches token ids, so every request has them: the workload's
(``input_ids``, ``output_ids``) when it gives them, else made-up ids that no other request
shares (a request's own prompt still goes into the tree, as in SGLang, and is evicted when
room is needed). A real model (:mod:`pagedkv.model_executor.model_runner`) appends the
tokens it samples to ``output_ids``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from pagedkv.errors import bad_value, check_positive_int
from pagedkv.mem_cache.base_prefix_cache import BasePrefixCache
from pagedkv.mem_cache.mamba_cache import MambaPrefixCache

_NO_KEY = np.empty(0, dtype=np.int64)
_INF = float("inf")
_POSITION_BITS = 24  # made-up token ids: (rid + 1) << 24 | position, never a real id's range


def synthetic_ids(rid: int, start: int, end: int) -> np.ndarray:
    """Made-up token ids for positions ``start .. end - 1`` of request ``rid``: unique to
    the request, so they never match another request's tokens in the tree."""
    return (np.int64(rid + 1) << _POSITION_BITS) | np.arange(start, end, dtype=np.int64)


class RequestLike(Protocol):
    """What the scheduler reads from a workload entry (:class:`pagedkv.workloads.RequestSpec`)."""

    prompt_len: int
    output_len: int | None
    max_new_tokens: int
    arrival_s: float


# slots: no per-instance __dict__. CPython shares one dict key table among instances only while
# they all have the same few attributes; with 30 fields (or one attribute set after __init__)
# each Req had its own ~1.6 KB dict instead of ~0.3 KB: 1.3 GB over a million requests
# (tests/managers/test_run_memory.py). Slots also refuse an attribute that is not a field.
@dataclass(eq=False, slots=True)
class Req:
    """A request's tokens and the scheduler's state for it.

    Attributes:
        rid: request id (position in the submitted workload).
        prompt_len: prompt tokens (``len(origin_input_ids)``).
        output_len: tokens it generates before it stops (EOS), known to the simulator only;
            None for a real model, which stops on EOS or ``max_new_tokens``.
        max_new_tokens: the client's cap (SGLang clamps it at arrival to what fits).
        arrival_s: when it reached the server, seconds: the workload's arrival time, or for
            a later turn of a conversation, when the turn before it finished if that is later
            (the client sends the next turn only once it has the answer; the scheduler sets
            it then). Latencies count from here.
        ignore_eos: the client asked to ignore EOS (admission treats it differently).
        input_ids: int64 ``[prompt_len]`` prompt tokens, or None (made-up ids).
        output_ids: the output tokens when known (workload-given, or sampled by a real
            model), else None (made-up ids).
        follows: rid of the request that must finish before this one arrives (the previous
            turn of a conversation), or None.
        generated: output tokens so far (kept across retraction, as SGLang keeps
            ``output_ids``).
        kv_committed_len: tokens whose KV is in the pool now (0 while waiting).
        req_pool_idx: row in ``req_to_token``, -1 while it holds none.
        mamba_pool_idx: a linear-attention hybrid's state slot
            (:class:`~pagedkv.mem_cache.mamba_pool.HybridReqToTokenPool`), taken with the row
            and given back with it; -1 while it holds none (always, on other models).
        prefix_len: tokens already computed before this pass's extend (a matched prefix, or
            earlier chunks); ``extend_len``: tokens this pass computes.
        cache_protected_len, last_node: the tree prefix it locks (see
            :class:`pagedkv.mem_cache.base_prefix_cache.CacheReq`).
        finished: it has stopped (its KV is released); ``finish_reason`` says why.
        first_admit_s, first_token_s, finish_s: times in seconds, None until they happen.
        num_retractions: times ``retract_decode`` sent it back.
        recomputed_tokens: KV tokens retraction freed that were computed again (what a
            re-prefill found in the radix cache is not recomputed).
        cached_tokens: prompt (and kept output) tokens served from the tree, over all its
            prefills (SGLang's ``#cached-token`` summed for this request).
        kept_at_retract: tokens of its KV the tree kept at its latest retraction (its cached
            prompt prefix).
        swa_evicted_seqlen, swa_branching_seqlen, swa_lock, extend_batch_idx,
        decode_batch_idx: on a sliding-window hybrid, the tokens below which its SWA
            slots are released, where its next checkpoint branches (the full-KV hit of its
            match that the window did not allow, SGLang's ``swa_branching_seqlen``), its
            :class:`~pagedkv.mem_cache.swa_radix_tree.SWALock`, and its extend and decode
            passes since its (re)admission (SGLang 0.5.23 ``Req.extend_batch_idx``,
            ``decode_batch_idx``).
        is_retracted: retracted and not yet admitted again (the overlap loop then drops
            the result of a pass it was in when that result comes in; SGLang's flag).
        queue_s: total seconds in the waiting queue (from arrival, and after every
            retraction).
    """

    rid: int
    prompt_len: int
    output_len: int | None
    max_new_tokens: int
    arrival_s: float = 0.0
    ignore_eos: bool = False
    input_ids: np.ndarray | None = None
    output_ids: list[int] | None = None
    follows: int | None = None
    generated: int = 0
    kv_committed_len: int = 0
    req_pool_idx: int = -1
    mamba_pool_idx: int = -1
    prefix_len: int = 0
    extend_len: int = 0
    cache_protected_len: int = 0
    last_node: Any = None
    finished: bool = False
    finish_reason: str = ""
    first_admit_s: float | None = None
    first_token_s: float | None = None
    finish_s: float | None = None
    num_retractions: int = 0
    recomputed_tokens: int = 0
    cached_tokens: int = 0
    kept_at_retract: int = 0
    is_retracted: bool = False
    queue_s: float = 0.0
    # a sliding-window hybrid's (SGLang 0.5.23 ``req.kv``): the SWA release cursor, the tree
    # lock, and the request's extend and decode passes since it was (re)admitted
    swa_evicted_seqlen: int = 0
    swa_branching_seqlen: int | None = None
    swa_lock: Any = None
    extend_batch_idx: int = 0
    decode_batch_idx: int = 0
    # a linear-attention hybrid's with the mamba radix cache (SGLang 0.5.23 ``req.kv``): its
    # track slots (-1: none) and which holds the next and the last tracked state, the
    # lengths of the last two tracked states, and the match's branching point
    mamba_ping_pong_track_buffer: list[int] | None = None
    mamba_next_track_idx: int | None = None
    mamba_last_track_idx: int | None = None
    mamba_last_track_seqlen: int | None = None
    mamba_prev_track_seqlen: int | None = None
    mamba_branching_seqlen: int | None = None
    enqueued_s: float = field(default=0.0, repr=False)
    admitted_before: bool = field(default=False, repr=False)
    # the slots of the prefix matched for the next prefill (set by the scheduler, used once).
    _prefix_slots: Any = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        p, out, cap, t = self.prompt_len, self.output_len, self.max_new_tokens, self.arrival_s
        # the common case in one test (a long run builds a million): plain ints and a float
        # that pass every check below; anything else takes the checks that name the field
        if not (type(p) is int and type(cap) is int and p >= 1 and type(t) is float
                and 0.0 <= t < _INF and (self.input_ids is None or len(self.input_ids) == p)
                and ((out is None and cap >= 1) or (type(out) is int and 1 <= out <= cap))):
            self._check()
        self.enqueued_s = t
        self._prefix_slots = None

    def _check(self) -> None:
        """Every field :meth:`__post_init__` checks, each failure a named ConfigError."""
        check_positive_int("prompt_len", self.prompt_len)
        if self.output_len is not None:
            check_positive_int("output_len", self.output_len)
        check_positive_int("max_new_tokens", self.max_new_tokens)
        if self.output_len is not None and self.max_new_tokens < self.output_len:
            raise bad_value("max_new_tokens", self.max_new_tokens,
                            f"an integer >= output_len={self.output_len}")
        if not self.arrival_s >= 0 or self.arrival_s == float("inf"):
            raise bad_value("arrival_s", self.arrival_s, "finite seconds >= 0")
        if self.input_ids is not None and len(self.input_ids) != self.prompt_len:
            raise bad_value("len(input_ids)", len(self.input_ids), f"prompt_len={self.prompt_len}")

    @classmethod
    def from_spec(cls, rid: int, spec: RequestLike) -> Req:
        """A fresh request from a workload entry; ConfigError on inconsistent lengths.

        A request for a real model has ``output_len`` None (it stops at EOS or
        ``max_new_tokens``) and ``output_ids`` empty: the model appends what it samples."""
        ids = getattr(spec, "input_ids", None)
        out = getattr(spec, "output_ids", None)
        output_len = None if spec.output_len is None else int(spec.output_len)
        return cls(rid, int(spec.prompt_len), output_len, int(spec.max_new_tokens),
                   float(spec.arrival_s), bool(getattr(spec, "ignore_eos", False)),
                   None if ids is None else np.asarray(ids, dtype=np.int64),
                   None if out is None else list(out), getattr(spec, "follows", None))

    # ----- tokens -----------------------------------------------------------------------
    @property
    def origin_len(self) -> int:
        """Prompt tokens (``len(origin_input_ids)``), the name the caches use."""
        return self.prompt_len

    @property
    def fill_len(self) -> int:
        """Tokens a (re)prefill covers: the prompt plus the output so far (SGLang ``fill_ids``)."""
        return self.prompt_len + self.generated

    def token_ids(self, end: int) -> np.ndarray:
        """The first ``end`` tokens of prompt + output, int64 ``[end]``."""
        p = self.prompt_len
        prompt = (self.input_ids[:min(end, p)] if self.input_ids is not None
                  else synthetic_ids(self.rid, 0, min(end, p)))
        if end <= p:
            return prompt
        # the known outputs, then made-up ids past them (an ignore-EOS request writes on past
        # its output_len): a token's id never changes as the request grows
        known = np.asarray((self.output_ids or [])[:end - p], dtype=np.int64)
        return np.concatenate((prompt, known, synthetic_ids(self.rid, p + len(known), end)))

    # ----- stopping ---------------------------------------------------------------------
    def should_stop(self) -> str:
        """Why it stops after its latest token ("" if it goes on): ``"length"`` at
        ``max_new_tokens``, ``"stop"`` at its ``output_len`` (the simulated EOS, which
        ``ignore_eos`` ignores)."""
        if self.generated >= self.max_new_tokens:
            return "length"
        if not self.ignore_eos and self.output_len is not None and self.generated >= self.output_len:
            return "stop"
        return ""

    # ----- admission --------------------------------------------------------------------
    def init_next_round_input(self, tree_cache: BasePrefixCache) -> None:
        """Match the prompt + output so far (all but the last token: one token must be
        computed to get the next one's logits) against ``tree_cache``.
        Source: ``Req.init_next_round_input``."""
        # a disabled cache (ChunkCache) never matches: its key need not be built
        key = _NO_KEY if tree_cache.disable else self.token_ids(max(self.fill_len - 1, 0))
        match = tree_cache.match_prefix(key)
        self.prefix_len = self.cache_protected_len = len(match.device_indices)
        self.last_node = match.last_device_node
        self._prefix_slots = match.device_indices
        self.swa_branching_seqlen = match.swa_branching_seqlen
        self.mamba_branching_seqlen = match.mamba_branching_seqlen
        if isinstance(tree_cache, MambaPrefixCache):  # the matched state, copied on write
            tree_cache.finalize_match_result(self, match)

    def admit(self, clock: float) -> str:
        """Admitted by a prefill pass at ``clock`` (seconds): its wait, cache hit and
        recomputed tokens are counted (pagedkv's metrics); returns the trace event's kind,
        ``"admit"`` or ``"reprefill"`` (after a retraction)."""
        self.is_retracted = False
        self.queue_s += clock - self.enqueued_s
        self.cached_tokens += self.prefix_len
        if self.first_admit_s is None:
            self.first_admit_s = clock
        if self.admitted_before:  # its freed KV, less what the tree still had, is computed again
            self.recomputed_tokens += self.fill_len - 1 - self.prefix_len
        kind = "reprefill" if self.admitted_before else "admit"
        self.admitted_before = True
        return kind
