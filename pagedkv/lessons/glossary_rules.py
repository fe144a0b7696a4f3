"""The words and rules the book states once: :class:`Term`, a request's lengths and the rules
that tie them, the request rows, the ignore-EOS exception.

The lengths of a request have one name each (:data:`LENGTHS`), and one rule ties them: the
newest sampled token has no KV yet. Its K and V are written by the next decode step, when it
is fed back in, so between steps ``kv_len = seq_len - 1``.

Two things SGLang calls slots have a word each: a *KV slot* holds one token's K and V (the
pool's unit); a *request row* is one row of the request table ``req_to_token``
(``ReqToTokenPool``, whose free list SGLang names ``free_slots``). :data:`REQUEST_ROWS_RULE`
says once how many rows that table has in each release. The book's other words are
:data:`pagedkv.lessons.glossary_terms.TERMS`; :mod:`pagedkv.lessons.glossary` gathers both.
"""

from __future__ import annotations

from dataclasses import dataclass

from pagedkv.releases import RELEASES, describe


@dataclass(frozen=True)
class Term:
    """One word of the book.

    Attributes:
        name: the term as the book writes it (Markdown, backticks for code names).
        chapter: the chapter (1-9) whose text defines it; it must not be used earlier.
        definition: one or two sentences, Markdown.
        source: where SGLang has it (file and name), or "" for a plain English word.
        pattern: a case-insensitive regular expression that finds a use in a chapter's text.
        listed: whether the chapter's own list of words (``terms_md``) shows it; False for a
            word the chapter's prose defines where it first uses it, listed by the glossary alone.
        first_use: for such a word, a few words of the clause that defines it; the first
            paragraph of its chapter that uses it must hold them ("" where not checked).
    """

    name: str
    chapter: int
    definition: str
    source: str
    pattern: str
    listed: bool = True
    first_use: str = ""


NEWEST_TOKEN_RULE = ("The newest sampled token has no KV yet: its K and V are written by the "
                     "next decode step, when it is fed back in. So between steps a request holds "
                     "`kv_len` = `seq_len` - 1 tokens of KV.")

# How many rows the request table has, in each release: SGLang's ReqToTokenPool.__init__
# (0.5.23 and 0.5.9 mem_cache/memory_pool.py), sized by 0.5.23's
# KVCacheConfigurator.resolve_max_num_reqs and 0.5.9's ModelRunner.init_memory_pool.
REQUEST_ROWS_RULE = ("The request table `req_to_token` hands out `size` request rows, one per "
                     "request that may run at once. In SGLang 0.5.23 `size` is "
                     "`max_running_requests`, and the table has `size + 1` rows: row 0 is a "
                     "padding row, never handed out, that CUDA-graph batches padded to a fixed "
                     "size point at. In SGLang 0.5.9 `size` comes from the pool and the context "
                     "length unless `--max-running-requests` is set (`max_running_requests`, "
                     "with the flag unset the smaller of `size` and half the pool's tokens, may "
                     "be smaller than `size`), and the table has `size` rows, all handed out.")



def ignore_eos_rule(who: str = "a running request told not to stop at an end-of-sequence token") -> str:
    """The one exception to a running request's reservation, release by release, from
    ``Release.ignore_eos_reserves_all`` (SGLang 0.5.23 ``managers/schedule_policy.py``,
    ``PrefillAdder._get_running_request_total_token_offset``). ``who`` names the request."""
    by_value: dict[bool, list[str]] = {}
    for r in RELEASES.values():
        by_value.setdefault(r.ignore_eos_reserves_all, []).append(r.name)
    say = {v: describe(RELEASES[names[0]], "ignore_eos_reserves_all") for v, names in by_value.items()}
    if True not in by_value:
        return f"Every release reserves {who} like the others."
    text = (f"One exception, in SGLang {' and '.join(by_value[True])}: {who} is reserved at "
            f"{say[True]}, all of its remaining `max_new_tokens` (clipped like the others)")
    if False in by_value:
        plain = say[False].replace("new_token_ratio", "`new_token_ratio`")
        text += f"; SGLang {' and '.join(by_value[False])} reserves it at {plain}, like the others"
    return text + "."


IGNORE_EOS_RULE = ignore_eos_rule()

# One name for each length of a request (chapter 1 introduces them, every chapter uses them).
LENGTHS: tuple[Term, ...] = (
    Term("`seq_len`", 1, "A request's tokens so far: its prompt plus every token it has generated, "
         "the newest sampled one included.", "`Req.seqlen`, `ScheduleBatch.seq_lens`",
         r"\bseq_len"),
    Term("`kv_len`", 1, "The tokens whose K and V are in the pool: `seq_len` - 1 between decode "
         "steps (the newest sampled token has no KV yet). The next decode step writes the KV of "
         "token number `kv_len`.",
         ("`Req.kv.kv_committed_len` (0.5.23, a `ReqKvInfo`; 0.5.9: `Req.kv_committed_len`; "
          "`managers/schedule_batch.py` in both)"), r"\bkv_len"),
    Term("`prefix_len`", 1, "The tokens at the start of a request whose KV is already in the pool "
         "when a prefill begins: the prefix the radix cache matched, plus earlier chunks of a "
         "chunked prompt. mini-sglang (a small teaching implementation from SGLang's developers, "
         "in a separate repository) calls it `cached_len`.",
         "`ScheduleBatch.prefix_lens`", r"\bprefix_len|cached_len"),
    Term("`extend_input_len`", 1, "The prompt tokens a prefill must still compute: `seq_len` - "
         "`prefix_len` (at most one chunk at a time with chunked prefill).",
         "`Req.extend_len` (0.5.23, a property; 0.5.9: `Req.extend_input_len`)",
         r"extend_input_len"),
)
