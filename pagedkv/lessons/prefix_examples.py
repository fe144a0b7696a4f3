"""The prefix-sharing chapter's examples: a radix tree over words, step by step, and the
seeded workloads its figures serve.

Words stand in for tokens (one word = one token id, numbered in order of first use) so that a
reader can read the tree. Every frame is read off a real
:class:`~pagedkv.mem_cache.radix_tree.RadixTree` (the radix cache's tree) over a real
allocator; the workloads run on the scheduler (:func:`pagedkv.lessons.prefix_runs.serve`).
"""

from __future__ import annotations

from dataclasses import dataclass

from pagedkv.errors import bad_value
from pagedkv.lessons.prefix_runs import PrefixRun, serve
from pagedkv.mem_cache.allocator import TokenToKVPoolAllocator
from pagedkv.mem_cache.radix_node import TreeNode
from pagedkv.mem_cache.radix_tree import RadixTree
from pagedkv.workloads.prefix import PrefixRequest, multi_turn, shared_system_prompt


@dataclass(frozen=True)
class NodeView:
    """One tree node as drawn: ids, its edge's words and slots, and its lock state."""

    id: int
    parent: int | None
    words: tuple[str, ...]
    slots: tuple[int, ...]
    lock_ref: int
    last_access_time: int


@dataclass(frozen=True)
class TreeFrame:
    """The whole tree after one event, with a caption saying what happened."""

    caption: str
    nodes: tuple[NodeView, ...]
    evictable: int
    protected: int
    free: int


class WordTree:
    """A :class:`RadixTree` fed with sentences; records a :class:`TreeFrame` per event.

    Args:
        size: KV slots of the pool (page size 1, so that every word can be matched).
    """

    def __init__(self, size: int = 64) -> None:
        self.tree = RadixTree(TokenToKVPoolAllocator(size))
        self.vocab: dict[str, int] = {}
        self.frames: list[TreeFrame] = []
        self.locked: dict[str, TreeNode] = {}

    def ids(self, sentence: str) -> list[int]:
        """Token ids of ``sentence``'s words, new words numbered in order of first use."""
        return [self.vocab.setdefault(w, len(self.vocab)) for w in sentence.split()]

    def words(self, key: tuple[int, ...]) -> tuple[str, ...]:
        """The words of token ids ``key``."""
        names = {i: w for w, i in self.vocab.items()}
        return tuple(names[t] for t in key)

    def record(self, caption: str) -> None:
        nodes = tuple(NodeView(n.id, n.parent.id if n.parent else None, self.words(tuple(n.key.tolist())),
                               tuple(int(s) for s in n.value), n.lock_ref, n.last_access_time)
                      for n in self.tree.nodes())
        t = self.tree
        self.frames.append(TreeFrame(caption, nodes, t.evictable_size(), t.protected_size(),
                                     t.allocator.available_size()))

    def insert(self, sentence: str) -> int:
        """Cache ``sentence`` as a finished request would: allocate slots for the words the
        tree lacks, insert, record. Returns how many words were already cached."""
        key = self.ids(sentence)
        cached = self.tree.match_prefix(key).device_indices.tolist()
        new = self.tree.allocator.alloc(len(key) - len(cached), strict=True).tolist()
        had, _, _ = self.tree.insert(key, cached + new)
        self.record(f'insert "{sentence}": {had} cached, {len(key) - had} new')
        return had

    def lock(self, sentence: str) -> int:
        """Match ``sentence`` and lock its path, as a running request does; returns the match."""
        match = self.tree.match_prefix(self.ids(sentence))
        self.tree.inc_lock_ref(match.last_device_node)
        self.locked[sentence] = match.last_device_node
        n = len(match.device_indices)
        self.record(f'"{sentence}" matches {n} and locks them')
        return n

    def unlock(self, sentence: str) -> None:
        """Unlock a sentence :meth:`lock` locked, as a finishing request does."""
        if sentence not in self.locked:
            raise bad_value("sentence", sentence, f"one of the locked {sorted(self.locked)}")
        self.tree.dec_lock_ref(self.locked.pop(sentence))
        self.record(f'"{sentence}" finishes: unlocked')

    def evict(self, num_tokens: int) -> int:
        """Evict at least ``num_tokens`` slots if it can; returns the slots freed."""
        freed = self.tree.evict(num_tokens)
        self.record(f"evict {num_tokens}: freed {freed} (least recently used leaves)")
        return freed


def radix_story() -> WordTree:
    """The chapter's story: four sentences build the tree (two splits), a request locks one
    path, eviction takes the least recently used unlocked leaves and spares the locked one."""
    story = WordTree(size=32)
    story.record("empty tree")
    for sentence in ("the cat sat on the mat", "the cat sat on a hat", "the cat ran",
                     "a dog ran"):
        story.insert(sentence)
    story.lock("the cat sat on a hat")
    story.evict(3)
    story.unlock("the cat sat on a hat")
    return story


# The chapter's two workloads and their pools (KV slots, request rows).
SUPPORT_POOL, SUPPORT_RUNNING = 65_536, 64
CHAT_POOL, CHAT_RUNNING = 8192, 16
# The support bot (chapters 4 and 8): chats, system prompt, question and answer lengths (tokens).
SUPPORT_CHATS, SUPPORT_SYSTEM_LEN = 128, 1000
SUPPORT_QUESTION, SUPPORT_ANSWER = (50, 150), (100, 300)


def support_bot() -> list[PrefixRequest]:
    """:data:`SUPPORT_CHATS` (128) chats that open with one :data:`SUPPORT_SYSTEM_LEN`
    (1,000)-token system prompt, then a 50-150-token question; answers of 100-300 tokens."""
    return shared_system_prompt(SUPPORT_CHATS, SUPPORT_SYSTEM_LEN, SUPPORT_QUESTION,
                                SUPPORT_ANSWER, seed=0)


# The chat service (chapter 8): conversations, turns each, shared system prompt (tokens).
CHAT_CONVERSATIONS, CHAT_TURNS, CHAT_SYSTEM_LEN = 24, 4, 300


def chat_service() -> list[PrefixRequest]:
    """:data:`CHAT_CONVERSATIONS` (24) conversations of :data:`CHAT_TURNS` (4) turns after a
    shared :data:`CHAT_SYSTEM_LEN` (300)-token system prompt; messages of 20-120 tokens,
    answers of 20-200; each turn resends the conversation so far."""
    return multi_turn(CHAT_CONVERSATIONS, CHAT_TURNS, (20, 120), (20, 200),
                      system_len=CHAT_SYSTEM_LEN, seed=0)


SUPPORT_MAX_NEW, CHAT_MAX_NEW = 512, 512  # the cap every client sends (tokens)


TIGHT_POOL, TIGHT_CHUNK = 2048, 512


def tight_chat_run() -> PrefixRun:
    """The chat service squeezed: a 2,048-slot pool, chunks of 512 tokens, clients that send
    each answer's exact length as ``max_new_tokens`` (admission then reserves little), so
    prompts are chunked and decode runs out of room: retraction with the tree on."""
    return serve(chat_service(), TIGHT_POOL, 1, CHAT_RUNNING, chunked_prefill_size=TIGHT_CHUNK)


def support_bot_runs() -> dict[bool, PrefixRun]:
    """The support bot served with the radix cache (True) and without (False)."""
    reqs = support_bot()
    return {radix: serve(reqs, SUPPORT_POOL, max_running=SUPPORT_RUNNING, radix=radix,
                         max_new_tokens=SUPPORT_MAX_NEW)
            for radix in (True, False)}


def chat_runs(page_sizes: tuple[int, ...] = (1, 16, 64)) -> dict[str, PrefixRun]:
    """The chat service at each page size with the radix cache (``"p = 16"``), plus page size 1
    without it (``"p = 1, cache disabled"``: SGLang's ``--disable-radix-cache``), keyed by
    those labels for the figure's slider."""
    reqs = chat_service()
    runs = {f"p = {p}": serve(reqs, CHAT_POOL, p, CHAT_RUNNING, max_new_tokens=CHAT_MAX_NEW)
            for p in page_sizes}
    runs["p = 1, cache disabled"] = serve(reqs, CHAT_POOL, 1, CHAT_RUNNING, radix=False,
                                          max_new_tokens=CHAT_MAX_NEW)
    return runs
