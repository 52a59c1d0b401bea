"""The recall hint for dangling references: which words of a person's message to look
for in the archive, and the one line a turn gets when older turns hold them.

Pure code, no I/O: the full-text index answers whether a term is in the session's
older messages (`ledger/recall/hint.py`); this module decides what to ask and what
to say.

Terms are picked mechanically, never by a model: paths and file names, identifiers
(snake_case, CamelCase, with digits), quoted or backticked text, acronyms, and
capitalised names that do not start a sentence; at most MAX_TERMS, in the order they
appear, each once. A term the assembled context already holds (case-insensitive) is
not asked about: the model can see it. The hint is one line naming the terms the
archive holds; failing those, a phrase that refers back ("like we discussed") gets a
hint only when turns the context no longer shows exist. Otherwise there is no hint: a
spurious one costs a tool call, a missing one a guess.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_TERMS = 6
MIN_CHARS = 3
REFERRING = (
    "like we discussed",
    "as we discussed",
    "we talked about",
    "as i said",
    "like i said",
    "like i mentioned",
    "as i mentioned",
    "as mentioned",
    "as before",
    "remember when",
    "you remember",
    "go back to",
    "we already",
    "last time",
    "earlier",
    "the previous",
    "that file",
    "that error",
    "that function",
)
# Capitalised words that are not names, even in mid-sentence.
COMMON_CAPS = frozenset(
    """
    I I'm I've I'd I'll OK Ok Yes No Hi Hello Thanks Please The This That These Those It
    Monday Tuesday Wednesday Thursday Friday Saturday Sunday January February March April
    May June July August September October November December
    """.split()  # noqa: SIM905 - a list literal of 40 words reads worse
)

_QUOTED = re.compile(r"`([^`\n]{3,80})`|\"([^\"\n]{3,80})\"")
_PATH = re.compile(
    r"(?<![\w/.-])(?:[\w.-]+/)+[\w.-]+|(?<![\w/.-])[\w-]+\.[A-Za-z][A-Za-z0-9]{0,7}\b"
)
_IDENT = re.compile(
    r"\b(?:[A-Za-z]+_[A-Za-z0-9_]+|[a-z]+[A-Z][A-Za-z0-9]*|[A-Z][a-z]+[A-Z][A-Za-z0-9]*"
    r"|[A-Za-z]+-?\d+[A-Za-z0-9]*|[A-Z]{3,})\b"
)
_WORD = re.compile(r"[A-Za-z][\w'-]*")
_SENTENCE_END = re.compile(r"[.!?:\n]\s*$")


@dataclass(frozen=True, slots=True)
class HintQuery:
    """What to ask the index: `terms` the context does not hold, and the phrase that
    refers back, if the message has one."""

    terms: tuple[str, ...]
    refers_back: str | None

    @property
    def empty(self) -> bool:
        return not self.terms and self.refers_back is None


def select(message: str, context: str) -> HintQuery:
    """The terms of `message` worth looking up that `context` does not hold; `context`
    is the assembled context's text, lower-cased by the caller once per turn."""
    lowered = message.lower()
    refers = next((p for p in REFERRING if p in lowered), None)
    terms: list[str] = []
    seen: set[str] = set()
    for term in candidates(message):
        key = term.lower()
        if key in seen or len(key) < MIN_CHARS:
            continue
        seen.add(key)
        if key not in context:
            terms.append(term)
            if len(terms) == MAX_TERMS:
                break
    return HintQuery(tuple(terms), refers)


def candidates(message: str) -> list[str]:
    """Every term picked, in the order they appear (repeats included)."""
    found: list[tuple[int, str]] = []
    taken: list[range] = []
    for pattern in (_QUOTED, _PATH, _IDENT):
        for m in pattern.finditer(message):
            span = range(m.start(), m.end())
            if any(span.start < t.stop and t.start < span.stop for t in taken):
                continue  # part of a term already picked (a word inside a path)
            taken.append(span)
            found.append((m.start(), next(g for g in m.groups() if g) if m.groups() else m[0]))
    for m in _WORD.finditer(message):
        word = m[0]
        if not word[0].isupper() or word in COMMON_CAPS or word.upper() == word:
            continue
        if any(m.start() in t for t in taken):
            continue
        before = message[: m.start()]
        if not before.strip() or _SENTENCE_END.search(before):
            continue  # a capital that starts a sentence says nothing
        found.append((m.start(), word))
    return [term for _, term in sorted(found)]


def hint_line(
    found: list[str], refers_back: str | None, older_turns: bool, meaning: bool = False
) -> str | None:
    """The turn's one-line hint, or None; `meaning`: recall by meaning is on, so the
    hint suggests the search that also finds what was said in other words."""
    how = "action 'search', mode 'both'" if meaning else "action 'search'"
    if found:
        named = ", ".join(f'"{t}"' for t in found)
        return (
            f"[Recall hint: {named} appear(s) in earlier turns of this conversation that"
            f" are not in your context; conversation_recall ({how}) finds them.]"
        )
    if refers_back is not None and older_turns:
        search = f" ({how}: it also finds them said in other words)" if meaning else ""
        return (
            f'[Recall hint: the message refers back ("{refers_back}") and earlier turns of'
            f" this conversation are not in your context; conversation_recall can search"
            f" them{search}.]"
        )
    return None
