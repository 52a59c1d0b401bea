"""Compaction planning, pure: when to compact, what to summarize, and how to ask.

No I/O. The shell runs the summarization (a model call, or ``fallback_summary`` when
no model is available or the call fails) and records the compaction turn.

A compaction is due (``compaction_due``) when the context the next call would send is
larger than ``threshold * window``; when the engine reported the prompt tokens of its
last call, the larger of that and our own estimate counts (tokenizers differ: the
engine's number is the truth for what was sent, ours covers what was added since).

``plan`` cuts the history at a turn boundary: it summarizes the oldest turns and
keeps the newest verbatim, together the whole history in order. Kept turns total at
most ``keep_recent_tokens``: the newest is kept whenever it fits there, and is
summarized with the rest when it does not, since a compaction that kept an oversized
turn would not bring the context back under the threshold. ``None`` when nothing
would be summarized.

Summaries chain: each request and each fallback summary starts from the previous
summary, so one compaction boundary carries everything before it. The fallback is
deterministic and never longer than ``max_tokens`` (it may be empty when even the
omission marker does not fit).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from core.packing import Msg, TurnBlock

DEFAULT_THRESHOLD = 0.85
_INPUT_CHARS = 200  # per turn line: the user inputs' first lines
_REPLY_CHARS = 160  # per turn line: the reply's first sentence
_SENTENCE_END = re.compile(r"(?<=[.!?])\s|\n")


class CountsTokens(Protocol):
    def count(self, text: str) -> int: ...


@dataclass(frozen=True, slots=True)
class CompactionPlan:
    summarize: tuple[TurnBlock, ...]  # oldest turns, to fold into the summary
    keep: tuple[TurnBlock, ...]  # newest turns, kept verbatim after the boundary
    summarized_through: str  # id of the last summarized turn
    first_kept: str | None  # id of the first kept turn, None if none is kept
    turns_summarized: int
    tokens_before: int  # history tokens before compaction (summarized + kept)
    tokens_summarized: int
    tokens_kept: int


def compaction_due(
    assembled_tokens: int,
    window: int,
    threshold: float = DEFAULT_THRESHOLD,
    reported_prompt_tokens: int | None = None,
) -> bool:
    """``max(reported, assembled) > threshold * window``."""
    if window <= 0:
        raise ValueError(f"window must be > 0, got {window}")
    tokens = max(assembled_tokens, reported_prompt_tokens or 0)
    return tokens > threshold * window


def plan(history: tuple[TurnBlock, ...], keep_recent_tokens: int) -> CompactionPlan | None:
    """Summarize the oldest turns, keep the newest within ``keep_recent_tokens``."""
    if keep_recent_tokens < 0:
        raise ValueError(f"keep_recent_tokens must be >= 0, got {keep_recent_tokens}")
    start, kept_tokens = len(history), 0
    while start > 0 and kept_tokens + history[start - 1].tokens <= keep_recent_tokens:
        start -= 1
        kept_tokens += history[start].tokens
    if start == 0:
        return None
    summarize, keep = history[:start], history[start:]
    summarized_tokens = sum(t.tokens for t in summarize)
    return CompactionPlan(
        summarize=summarize,
        keep=keep,
        summarized_through=summarize[-1].turn_id,
        first_kept=keep[0].turn_id if keep else None,
        turns_summarized=len(summarize),
        tokens_before=summarized_tokens + kept_tokens,
        tokens_summarized=summarized_tokens,
        tokens_kept=kept_tokens,
    )


SUMMARY_SYSTEM_PROMPT = """\
You compact a conversation between a user and an AI assistant so that it can go on \
without the transcript. Write a concise summary that keeps:
- decisions made and the reasons given;
- facts learned: names of people, places, files, identifiers, numbers, results;
- what was asked and what was delivered;
- open tasks, promises and unanswered questions.
If a previous summary is given, merge it with the new turns into one summary: keep what \
still holds, update what changed, drop nothing that may matter later. Write plain text \
in the conversation's language, no preamble. Output only the summary."""


def summary_request(
    turns: Sequence[TurnBlock],
    previous_summary: str | None,
    instructions: str | None,
    *,
    max_message_chars: int | None = None,
) -> tuple[str, str]:
    """(system prompt, user prompt) asking a model to summarize ``turns``.

    ``instructions`` (e.g. from ``/compact Focus on decisions``) are added as the
    user's focus; ``max_message_chars`` cuts long messages (tool output) in the
    transcript, marking how much was cut.
    """
    parts: list[str] = []
    if previous_summary:
        parts.append(f"<previous_summary>\n{previous_summary.strip()}\n</previous_summary>")
    lines = [_transcript_entry(m, max_message_chars) for t in turns for m in t.messages]
    parts.append("<transcript>\n" + "\n\n".join(lines) + "\n</transcript>")
    if instructions and instructions.strip():
        parts.append(f"Focus of this summary, as requested: {instructions.strip()}")
    parts.append("Write the updated summary now." if previous_summary else "Write the summary now.")
    return SUMMARY_SYSTEM_PROMPT, "\n\n".join(parts)


def _transcript_entry(m: Msg, max_chars: int | None) -> str:
    who = f"{m.role} ({m.name})" if m.name else m.role
    text = m.content
    if max_chars is not None and len(text) > max_chars:
        text = f"{text[:max_chars]}[... {len(text) - max_chars} more characters cut]"
    return f"[{who}]\n{text}"


def fallback_summary(
    turns: Sequence[TurnBlock],
    previous_summary: str | None,
    max_tokens: int,
    counter: CountsTokens,
) -> str:
    """A summary without a model: the previous summary's lines, then one line per turn
    (inputs' first lines -> reply's first sentence), newest last, cut to ``max_tokens``
    by dropping the oldest lines behind a marker saying how many were omitted."""
    if max_tokens < 0:
        raise ValueError(f"max_tokens must be >= 0, got {max_tokens}")
    lines = [ln for ln in (previous_summary or "").strip().splitlines() if ln.strip()]
    lines += [_turn_line(t) for t in turns]
    text = "\n".join(lines)
    if counter.count(text) <= max_tokens:
        return text
    return _cut_oldest(lines, max_tokens, counter)


def _cut_oldest(lines: list[str], max_tokens: int, counter: CountsTokens) -> str:
    """The most newest lines that fit behind an omission marker ("" if none does)."""
    costs = [counter.count(line + "\n") for line in lines]
    keep, total = 0, counter.count(_marker(len(lines)))
    while keep < len(lines) and total + costs[-1 - keep] <= max_tokens:
        total += costs[-1 - keep]
        keep += 1
    while keep >= 0:  # per-line sums are an estimate: check the joined text exactly
        text = _render(lines, keep)
        if counter.count(text) <= max_tokens:
            return text
        keep -= 1
    return ""


def _render(lines: list[str], keep: int) -> str:
    kept = lines[len(lines) - keep :] if keep else []
    return "\n".join([_marker(len(lines) - keep), *kept])


def _marker(omitted: int) -> str:
    return f"[{omitted} earlier summary lines omitted]"


def _turn_line(turn: TurnBlock) -> str:
    asked = " / ".join(filter(None, (_first_line(m) for m in turn.messages if m.role == "user")))
    replies = [m.content.strip() for m in turn.messages if m.role == "assistant"]
    reply = next((r for r in reversed(replies) if r), "")
    line = f"- {turn.turn_id}: {_clip(asked, _INPUT_CHARS) or '(no input)'}"
    if reply:
        line += f" -> {_clip(_SENTENCE_END.split(reply, maxsplit=1)[0], _REPLY_CHARS)}"
    return line


def _first_line(m: Msg) -> str:
    first = m.content.strip().split("\n", 1)[0].strip()
    return f"{m.name}: {first}" if m.name else first


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"
