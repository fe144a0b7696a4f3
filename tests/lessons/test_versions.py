"""The table of changes from SGLang 0.5.9 to 0.5.23: each row's two answers, by hand."""

from __future__ import annotations

import re

from pagedkv.lessons.versions import version_changes
from pagedkv.managers.config import VERSION_DIFFERENCES
from pagedkv_widgets.tables import version_changes_table


def test_each_change_gives_the_answer_worked_out_by_hand() -> None:
    rows = {r.change: (r.old, r.new) for r in version_changes()}
    # ceil64(3000) = 3008 plus min(2000, 4096); 0.5.23 adds one page of 64
    assert rows["every admitted request costs one page more"] == ("charged 5,008", "charged 5,072")
    # 0.5.9: 64 >= 100 - 64 left -> OTHER; 0.5.23 checks the prompt budget only without chunks
    crossing = "with chunked prefill, max_prefill_tokens admits the request that reaches or crosses it"
    assert rows[crossing] == ("1 admitted", "2 admitted")
    assert rows["the prefill log counts raw tokens"] == ("#new-token: 32", "#new-token: 23")
    # 45 free, 46 needed: 0.5.9 evicts 46 tokens' worth (all three 5-token leaves), 0.5.23 one
    # leaf (the least recently used), so the third cached prompt is still there for its repeat
    assert rows["eviction frees only what is missing"] == (
        "evicts 15 tokens; the last request finds 0 cached",
        "evicts 5 tokens; the last request finds 5 cached")
    assert rows["freed pages return in row order, not sorted"] == (
        "free list starts 1, 2, 3, 4, 5, 7", "free list starts 5, 2, 7, 1, 3, 4")
    assert rows["a cached answer is split from its prompt"] == ("1 node(s)", "2 node(s)")
    assert rows["a request that cannot decode alone is aborted"] == (
        "raises (the server stops)", "aborts request 0")
    assert rows["bigger prefill chunks on 20-35 GiB cards"] == ("2,048 tokens", "4,096 tokens")


def test_the_newer_rows_give_the_answer_worked_out_by_hand() -> None:
    rows = {r.change: (r.old, r.new) for r in version_changes()}
    # 100 tokens left: times the ratio 0.5, or all of them
    assert rows["a running ignore-EOS request reserves all it has left"] == (
        "reserves 50 tokens", "reserves 100 tokens")
    # 32 // 16 * 16 = 32; (6 + 32) // 16 * 16 - 6 = 26
    assert rows["a chunk ends where the sequence fills a page"] == (
        "a chunk of 32 tokens", "a chunk of 26 tokens")
    # max_req_len 255: 255 - 200 - 1 = 54; 0.5.23 also 256 - 208 - 16 - 1 = 31
    assert rows["max_new_tokens is capped by the pool at arrival (chapter 4, \"What SGLang does\")"] == (
        "max_new_tokens becomes 54", "max_new_tokens becomes 31")
    # 4 - 0 running; 0.5.23: at most the 3 rows still free
    assert rows["a pass admits no more requests than there are free rows"] == (
        "admits up to 4", "admits up to 3")
    assert rows["finished requests leave the batch at the start of every step"] == (
        "2 in the batch", "1 in the batch")
    assert rows["an empty batch that admits nothing is not full"] == ("batch_is_full", "not full")
    # 0.5.9 matches request 1 against the 32 tokens of request 0's first chunk, then stops
    assert rows["a pass stops at a spent chunk budget before matching the next request"] == (
        "request 1 matched 32 cached tokens", "request 1 matched 0 cached tokens")
    assert rows["the prefixes of waiting requests are kept fresh"] == (
        "the waiting request's prefix evicted", "the waiting request's prefix kept")
    assert rows["new_token_ratio is reset only when the server is idle"] == (
        "new_token_ratio 0.70", "new_token_ratio 0.30")
    # pages 1-2 (request 0) and 3-4 (request 1) go to the front one call at a time, or together
    assert rows["a prefill pass frees its finished requests in one group"] == (
        "free list starts 3, 4, 1, 2", "free list starts 1, 2, 3, 4")
    assert rows["row 0 of the page table pads and is never handed out"] == (
        "2 rows, requests get 0, 1", "3 rows, requests get 1, 2")
    assert rows["the row freed last is reused first"] == (
        "row 2 (a never-used one)", "row 2 (the one just freed)")
    assert rows["bigger decode CUDA graphs on 20-35 GiB cards"] == ("24 requests", "48 requests")
    assert rows["memory is kept aside for prefill CUDA graphs"] == (
        "mem_fraction_static 0.835", "mem_fraction_static 0.830")
    # 1,000 tokens: 0.5.9 keeps the 2,048-row minimum, 0.5.23 sizes the rows to 1000 // 2
    # REQUEST_ROWS_RULE: 0.5.9 hands out all its rows, more than the running cap; 0.5.23 one
    # row per running request (its padding row, row 0, is never handed out)
    assert rows["the page table hands out max_running_requests rows"] == (
        "2,048 request rows handed out, for at most 500 running requests",
        "500 request rows handed out, for at most 500 running requests")
    assert rows["`--max-running-requests` is capped at half the pool"] == (
        "max_running_requests 4,000", "max_running_requests 500")
    assert rows["the allocation log line names the KV dtype"] == (
        "KV Cache is allocated. #tokens: N", "KV Cache is allocated. dtype: torch.bfloat16, #tokens: N")
    assert rows["weights that fill the budget get their own error"] == (
        "Not enough memory", "Loaded weights leave no GPU memory")
    assert rows["cutlass_mla is gone (cutedsl_mla and hpc_ops are new)"] == (
        "page size 128", "not offered")
    assert rows["trtllm_mha accepts pages of 128"] == ("page size 64", "page size 128")
    assert rows["fa4 by default for K and V of different widths on sm_100"] == ("trtllm_mha", "fa4")
    assert rows["no FlashInfer by default for a model with attention sinks and no backend rule "
                "of its own"] == (
        "flashinfer", "triton")


def test_table_and_rule_list() -> None:
    table = version_changes_table(version_changes()).data.splitlines()
    assert table[0] == "| what changed | the same input | SGLang 0.5.9 | SGLang 0.5.23 |"
    assert len(table) == 2 + len(version_changes())
    assert all(len(row) == 4 and row[3] for row in VERSION_DIFFERENCES)


def test_flags_in_the_tables_keep_their_double_dash() -> None:
    # Markdown renders a bare "--max-total-tokens" with an en dash; in backticks it stays literal
    from pagedkv.releases import differences
    from pagedkv_widgets.reference import releases_md

    bare_flag = re.compile(r"(?<![`\w-])--[a-z]")
    texts = [version_changes_table(version_changes()).data, releases_md().data]
    texts += [cell for row in differences() for cell in row]
    for text in texts:
        assert not bare_flag.search(text), text


def test_the_dsa_fp8_row_names_the_indexer_key() -> None:
    """61 layers x (576 fp8 latent bytes or the 656 the pool stores, + 132 B of index key:
    128 fp8 values and one float32 scale)."""
    rows = {r.change: (r.old, r.new) for r in version_changes()}
    row = rows["an fp8 DeepSeek V3.2 pool is sized by the bytes it stores (scales, bf16 rope)"]
    key = "the indexer key's 132 B"
    assert row == (f"43,188 B per token (61 layers x 708 B: 576 B of latent and {key})",
                   f"48,068 B per token (61 layers x 788 B: 656 B of latent and {key})")
