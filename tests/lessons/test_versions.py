"""The table of changes from SGLang 0.5.9 to 0.5.23: each row's two answers, by hand."""

from __future__ import annotations

from pagedkv.lessons.versions import version_changes
from pagedkv.managers.config import VERSION_DIFFERENCES
from pagedkv_widgets.tables import version_changes_table


def test_each_change_gives_the_answer_worked_out_by_hand() -> None:
    rows = {r.change: (r.old, r.new) for r in version_changes()}
    # ceil64(3000) = 3008 plus min(2000, 4096); 0.5.23 adds one page of 64
    assert rows["every admitted request costs one page more"] == ("charged 5,008", "charged 5,072")
    # 0.5.9: 64 >= 100 - 64 left -> OTHER; 0.5.23 checks the prompt budget only without chunks
    assert rows["max_prefill_tokens binds only without chunked prefill"] == ("1 admitted", "2 admitted")
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


def test_table_and_rule_list() -> None:
    table = version_changes_table(version_changes()).data.splitlines()
    assert table[0] == "| what changed | the same input | SGLang 0.5.9 | SGLang 0.5.23 |"
    assert len(table) == 2 + len(version_changes())
    assert all(len(row) == 4 and row[3] for row in VERSION_DIFFERENCES)
