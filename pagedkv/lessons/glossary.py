"""The book's words: one definition for each term, and the chapter that introduces it.

The glossary page, the short list at the top of chapter 1 and the tests that hold every term
to "defined before its first use" all read :data:`TERMS`, so a definition is written once.
Each term names where SGLang has it (0.5.23's file, with 0.5.9's where it differs).

The words are :mod:`pagedkv.lessons.glossary_terms` (data); :class:`Term`, a request's
lengths (:data:`LENGTHS`) and the rules the book states once (:data:`NEWEST_TOKEN_RULE`,
:data:`REQUEST_ROWS_RULE`, :func:`ignore_eos_rule`) are :mod:`pagedkv.lessons.glossary_rules`.
This module gathers them and looks terms up.
"""

from __future__ import annotations

from pagedkv.errors import bad_value, check_positive_int
from pagedkv.lessons.glossary_rules import (
    IGNORE_EOS_RULE,
    LENGTHS,
    NEWEST_TOKEN_RULE,
    REQUEST_ROWS_RULE,
    Term,
    ignore_eos_rule,
)
from pagedkv.lessons.glossary_terms import TERMS

__all__ = ["IGNORE_EOS_RULE", "LENGTHS", "NEWEST_TOKEN_RULE", "REQUEST_ROWS_RULE", "TERMS", "Term",
           "ignore_eos_rule", "term_chapter", "terms_of_chapter"]


def term_chapter(name: str) -> int:
    """The chapter that introduces the term called ``name`` (as :attr:`Term.name` writes it).

    Raises:
        pagedkv.errors.ConfigError: no term has that name.
    """
    for t in TERMS:
        if t.name == name:
            return t.chapter
    raise bad_value("name", name, "a term of TERMS")


def terms_of_chapter(chapter: int) -> tuple[Term, ...]:
    """The terms ``chapter`` (1-9) introduces, in the order of :data:`TERMS`.

    Raises:
        pagedkv.errors.ConfigError: ``chapter`` is not 1-9.
    """
    check_positive_int("chapter", chapter, minimum=1)
    if chapter > 9:
        raise bad_value("chapter", chapter, "1-9")
    return tuple(t for t in TERMS if t.chapter == chapter)
