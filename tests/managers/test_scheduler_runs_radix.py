"""A run with the radix cache on (SGLang's default server), every slot worked out by hand.

Three requests share a 10-token system prompt ``S`` on a 64-slot pool, page size 1:
A = S + 5 tokens and B = S + 5 other tokens arrive at t=0 (4 outputs each), C = S + 5 more at
t=1 s (2 outputs). The default step time is 10 ms.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from pagedkv.managers import Scheduler, SchedulerConfig

S = tuple(range(100, 110))


@dataclass(frozen=True)
class Spec:
    prompt_len: int
    output_len: int
    max_new_tokens: int
    arrival_s: float
    input_ids: tuple[int, ...]
    output_ids: tuple[int, ...]


SPECS = [Spec(15, 4, 4, 0.0, (*S, 1, 2, 3, 4, 5), (11, 12, 13, 14)),
         Spec(15, 4, 4, 0.0, (*S, 6, 7, 8, 9, 10), (21, 22, 23, 24)),
         Spec(15, 2, 2, 1.0, (*S, 31, 32, 33, 34, 35), (41, 42))]


def run(version: str, page: int = 1) -> tuple[Scheduler, dict[int, list[int]]]:
    s = Scheduler(SPECS, max_total_num_tokens=64, page_size=page, fast_forward=False,
                  config=SchedulerConfig(sglang_version=version, disable_overlap_schedule=True))
    free_lists = {}
    while s.step():
        s.check_invariants()
        free_lists[s.num_steps - 1] = s.allocator.free_pages.tolist()
    return s, free_lists


@pytest.mark.parametrize("version", ["0.5.23", "0.5.9"])
def test_shared_prompt_by_hand(version: str) -> None:
    s, free = run(version)
    st = s.trace.steps
    # step 0: A and B admitted together, nothing cached yet (0.5.23 charges one page more:
    # 15 + 4 + 1 each). Prefill writes A to slots 1-15, B to 16-30. After it, A is inserted;
    # B's insert finds S there: B's own copies of S (slots 16-25) are freed to the back of
    # the free list and B's row points at A's slots 1-10.
    assert s.req_to_token_pool.req_to_token[s.reqs[1].req_pool_idx, :0].numel() == 0
    assert free[0] == [*range(31, 65), *range(16, 26)]
    assert (st["tokens_free"][0], st["tokens_evictable"][0], st["tokens_protected"][0]) == (44, 0, 20)
    # steps 1-3: A and B decode 3 tokens each from the front (31-36) and finish at step 3;
    # each leaves prompt + 3 outputs (its last token has no KV) cached: 10 + 2 * (5 + 3) = 26
    assert free[3] == [*range(37, 65), *range(16, 26)]
    assert (st["tokens_free"][3], st["tokens_evictable"][3], st["tokens_protected"][3]) == (38, 26, 0)
    # step 4: nothing waits or runs: idle, the ratio back to 0.7, the clock to C's arrival
    assert st["kind"][4] == "idle" and st["new_token_ratio"][4] == 0.7 and st["time_s"][4] == 1.0
    # step 5: C matches S (10 tokens, locked now), computes its 5 others in slots 37-41
    assert (st["tokens_free"][5], st["tokens_evictable"][5], st["tokens_protected"][5]) == (33, 16, 15)
    # step 6: C finishes after 2 outputs: 16 more evictable tokens (its 5 + 1 output)
    assert (st["tokens_free"][6], st["tokens_evictable"][6], st["tokens_protected"][6]) == (32, 32, 0)
    assert st["kind"] == ["prefill", "decode", "decode", "decode", "idle", "prefill", "decode"]
    assert [(e.step, e.kind, e.rid) for e in s.trace.events] == [
        (0, "admit", 0), (0, "admit", 1), (3, "finish", 0), (3, "finish", 1), (5, "admit", 2),
        (6, "finish", 2)]
    assert s.trace.events_of("admit")[2].extra == {"extend": 5, "cached": 10}
    # SGLang's lines, field for field; throughputs are modelled (10 ms a step)
    if version == "0.5.23":
        tails = [", #pending-token: 0, cuda graph: False, input throughput (token/s): 3000.00",
                 ", #pending-token: 0, cuda graph: False, input throughput (token/s): 500.00"]
    else:
        tails = [", input throughput (token/s): 3000.00, cuda graph: False",
                 ", input throughput (token/s): 500.00, cuda graph: False"]
    assert s.trace.log == [
        "Prefill batch, #new-seq: 2, #new-token: 30, #cached-token: 0, token usage: 0.31, "
        "#running-req: 0, #queue-req: 0" + tails[0],
        "Prefill batch, #new-seq: 1, #new-token: 5, #cached-token: 10, token usage: 0.23, "
        "#running-req: 0, #queue-req: 0" + tails[1]]
    assert [r.cached_tokens for r in s.reqs] == [0, 0, 10]
    s.check_memory()


@pytest.mark.parametrize("version", ["0.5.23", "0.5.9"])
def test_page_size_4_by_hand(version: str) -> None:
    # Pages of 4 (page k = slots 4k .. 4k+3): A takes pages 1-4 (15 tokens), B pages 5-8.
    # A caches 12 tokens (3 whole pages); B matches 8 of them (S's first two pages; the third
    # page differs), so the tree splits A's node after 8 tokens and B frees its own pages 5-6.
    s, free = run(version, page=4)
    st = s.trace.steps
    assert free[0] == [5, 6, *range(9, 17)]
    assert [st["tokens_free"][k] for k in range(7)] == [40, 40, 32, 40, 40, 32, 32]
    # step 2 writes position 16: a new page each (5 for A, 6 for B); step 3 finishes both,
    # their last page (positions 16-17, not cached: not a whole page) goes back
    assert free[2] == list(range(9, 17)) and free[3] == [5, 6, *range(9, 17)]
    # cached at the end of step 3: S's 8 + A's 4 + 4 and B's 4 + 4 (prompt + first output)
    assert st["tokens_evictable"][3] == 24
    # C matches the 8 tokens of S's whole pages and computes the other 7 (0.5.9 logs the
    # page-rounded 8); it finishes at step 6 caching 8 more tokens
    assert (st["tokens_evictable"][5], st["tokens_protected"][5]) == (16, 12)
    assert st["tokens_evictable"][6] == 32
    new_token = {"0.5.23": (30, 7), "0.5.9": (32, 8)}[version]
    assert [line.split(", ")[2:4] for line in s.trace.log] == [
        [f"#new-token: {new_token[0]}", "#cached-token: 0"],
        [f"#new-token: {new_token[1]}", "#cached-token: 8"]]
