"""The `conversation_recall` tool: an agent reads its own verbatim archive.

Nothing in the ledger is ever deleted or summarized away; this tool is how a
model gets back what has left its context window. It answers in compact text,
not JSON: one line a search hit, one block a message.

The default scope is the calling session and the other DM sessions of the same person
(its canonical entity, after merges: ledger/recall/scope.py), never another person's;
`session: "*"` searches all the sessions the turn reaches (core/reach.py) and another
label reads that session if the turn reaches it, both only when the broker allows it
(`cross_session=True`). The answer fits
`budget_tokens` as measured by `count_tokens`: long tool results are cut first
(longest first), then messages (oldest, or for search the lowest ranked, first), then
whole entries are left out, and the answer says what was cut. Bad arguments raise
`EngineError` with a sentence for the model; the broker turns it into a tool error
result.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Protocol

from broker.engines.base import EngineError
from core.engine_types import ToolSpec
from core.reach import REFUSED
from core.session_state import render
from ledger.port.errors import LedgerLookupError, NotReachable
from ledger.port.records import (
    ROLES,
    Entry,
    Found,
    Hit,
    Neighbour,
    Reaching,
    Request,
    Searched,
    Summary,
)

ACTIONS = ("search", "range", "tool_calls", "summary")
MODES = ("words", "meaning", "both")
ALL_SESSIONS = "*"
DEFAULT_LIMIT = {"search": 10, "range": 40, "tool_calls": 10, "summary": 1}
MAX_LIMIT = {"search": 50, "range": 200, "tool_calls": 50, "summary": 1}
MESSAGE_MAX = 6000  # characters of one message shown by range
RESULT_MAX = 2000  # characters of one tool result
ARGS_MAX = 300  # characters of a tool call's arguments
CUT = 400  # what is left of an entry cut to fit the budget

RECALL_TOOL = ToolSpec(
    name="conversation_recall",
    description=(
        "Read this conversation's full archive: every earlier message and tool call is kept"
        " verbatim, including what is no longer in your context. Use it before asking the"
        " user to repeat something. Actions: 'search' finds messages by words (all words"
        ' must match; "exact phrase" in quotes; a trailing * matches a prefix, as in'
        " auth*), each hit with the turns just before and after it (mode 'meaning' finds"
        " messages that say the same in other words, 'both' merges the two lists);"
        " 'range' shows whole"
        " turns around a turn id from search results, by their numbers in the thread"
        " (start_turn, end_turn: 1 is the first turn, -1 the latest), or between two"
        " times; 'tool_calls' lists recent tool calls, optionally of one tool;"
        " 'summary' gives the latest compaction summary, the session's counts and its state"
        " record (focus, files, decisions, errors). Times are UTC. By default this session"
        " and this person's other sessions (from other channels, after their identities"
        " were merged) are read; session '*' searches all sessions."
    ),
    parameters={
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": list(ACTIONS)},
            "query": {"type": "string", "description": "search: the words to find."},
            "mode": {
                "type": "string",
                "enum": list(MODES),
                "description": "search: by 'words' (default), by 'meaning', or 'both'.",
            },
            "session": {
                "type": "string",
                "description": "A session label; '*' (search only) for all sessions."
                " Default: this session.",
            },
            "roles": {
                "type": "array",
                "items": {"type": "string", "enum": sorted(ROLES)},
                "description": "search: only messages of these roles.",
            },
            "around_turn": {
                "type": "string",
                "description": "range: a turn id; that turn and context_turns on each side.",
            },
            "context_turns": {"type": "integer", "minimum": 0, "maximum": 10, "default": 2},
            "start_turn": {
                "type": "integer",
                "description": "range: the first turn by number in the thread (1: its first,"
                " -1: the latest).",
            },
            "end_turn": {
                "type": "integer",
                "description": "range: the last turn by number, inclusive (default: 10 turns).",
            },
            "since": {
                "type": "string",
                "description": "search, range: ISO 8601 time (UTC if no offset), inclusive.",
            },
            "until": {"type": "string", "description": "search, range: ISO 8601 time."},
            "tool_name": {"type": "string", "description": "tool_calls: only this tool."},
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": 200,
                "description": "Most results (search 10, range 40 entries, tool_calls 10).",
            },
        },
        "required": ["action"],
        "additionalProperties": False,
    },
)


class RecallReader(Protocol):
    """The one read the tool needs: `ledger/port/protocols.py` ReadPort.recall."""

    def recall(self, req: Request) -> Awaitable[Found]: ...


@dataclass(frozen=True, slots=True)
class Block:
    """One hit or entry of the answer; `body` is what may be cut."""

    head: str
    body: str = ""
    tool: bool = False
    group: str = ""  # the line of the turn the entry belongs to (range)

    def text(self) -> str:
        return f"{self.head}\n{self.body}" if self.body else self.head


@dataclass(frozen=True, slots=True)
class Answer:
    """What an action found, before it is fitted to the budget."""

    header: str
    blocks: list[Block]
    footer: str = ""
    oldest_first: bool = False  # range: the first blocks are the oldest

    def text(self, blocks: list[Block] | None = None, note: str = "") -> str:
        parts, group = [self.header], ""
        for b in self.blocks if blocks is None else blocks:
            if b.group != group:  # a turn's line, before its first entry still shown
                group = b.group
                parts.append(group)
            parts.append(b.text())
        return "\n".join(p for p in [*parts, self.footer, note] if p)


async def conversation_recall(
    ledger: RecallReader,
    session_label: str,
    arguments: Mapping[str, Any],
    count_tokens: Callable[[str], int],
    budget_tokens: int = 8000,
    *,
    cross_session: bool = True,
    neighbours: tuple[int, int] = (1, 1),
    reaching: Reaching | None = None,
    embed: Callable[[str], Awaitable[bytes]] | None = None,
) -> str:
    """Run one call of the tool for the session `session_label` (see the Rules);
    `neighbours`: the turns shown before and after each search hit; `reaching`: the
    reach of the calling turn (a session past it raises `NotReachable`); `embed`: the
    query's vector for a search by meaning (None: recall by meaning is off)."""
    req = parse_arguments(arguments, session_label, cross_session)
    if req.mode != "words":
        req = replace(req, query_vector=await _embedded(req, embed))
    if req.action == "search":
        req = replace(req, before=neighbours[0], after=neighbours[1])
    if reaching is not None:
        req = replace(req, reaching=reaching)
    try:
        found = await ledger.recall(req)
    except NotReachable:
        raise
    except (ValueError, LedgerLookupError) as exc:
        raise EngineError(f"conversation_recall {req.action}: {exc}") from exc
    return fit(_answer(req, found), count_tokens, budget_tokens)


async def _embedded(req: Request, embed: Callable[[str], Awaitable[bytes]] | None) -> bytes:
    assert req.query is not None  # parse_arguments checked
    if embed is None:
        raise _bad(f"mode {req.mode!r} is off on this broker ([recall] model_dir); use 'words'")
    try:
        return await embed(req.query)
    except RuntimeError as exc:  # EncoderUnavailable: the extra or the model is missing
        raise _bad(f"mode {req.mode!r} is unavailable: {exc}; use 'words'") from exc


# -- arguments ---------------------------------------------------------------

_KNOWN = frozenset(RECALL_TOOL.parameters["properties"])


def parse_arguments(args: Mapping[str, Any], own: str, cross_session: bool) -> Request:
    given = {k: v for k, v in args.items() if v is not None}
    unknown = sorted(set(given) - _KNOWN)
    if unknown:
        raise _bad(f"unknown argument {unknown[0]!r}; the arguments are {', '.join(_KNOWN)}")
    action = given.get("action")
    if action not in ACTIONS:
        raise _bad(f"action must be one of {', '.join(ACTIONS)}")
    session = _session(given, action, own, cross_session)
    req = Request(
        action=action,
        session=session,
        limit=_int(given, "limit", 1, MAX_LIMIT[action], DEFAULT_LIMIT[action]),
        query=_str(given, "query", 500),
        roles=_roles(given),
        around_turn=_str(given, "around_turn", 64),
        context_turns=_int(given, "context_turns", 0, 10, 2),
        since_ms=_time(given, "since"),
        until_ms=_time(given, "until"),
        tool_name=_str(given, "tool_name", 128),
        start_turn=_turn_number(given, "start_turn"),
        end_turn=_turn_number(given, "end_turn"),
        person=session == own,
        mode=_mode(given, action),
    )
    _check_action(req)
    return req


def _mode(given: Mapping[str, Any], action: str) -> str:
    value = given.get("mode", "words")
    if value not in MODES:
        raise _bad(f"mode must be one of {', '.join(MODES)}")
    if value != "words" and action != "search":
        raise _bad("mode is for search only")
    return str(value)


def _check_action(req: Request) -> None:
    if req.action == "search" and req.query is None:
        raise _bad("search needs a query")
    bounds = (req.around_turn, req.since_ms, req.until_ms, req.start_turn, req.end_turn)
    if req.action == "range" and bounds == (None,) * len(bounds):
        raise _bad(
            "range needs around_turn (a turn id from search), start_turn/end_turn (turn"
            " numbers) or since/until"
        )


def _bad(message: str) -> EngineError:
    return EngineError(f"conversation_recall: {message}")


def _session(given: Mapping[str, Any], action: str, own: str, cross_session: bool) -> str | None:
    value = _str(given, "session", 256)
    if value is None or value == own:
        return own
    if not cross_session:  # another session is past this turn's reach: refused, audited
        raise NotReachable(REFUSED, field="session")
    if value == ALL_SESSIONS:
        if action != "search":
            raise _bad("session '*' (all sessions) is for search only")
        return None
    return value


def _str(given: Mapping[str, Any], key: str, max_len: int) -> str | None:
    value = given.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > max_len:
        raise _bad(f"{key} must be a non-empty string of at most {max_len} characters")
    return value.strip()


def _int(given: Mapping[str, Any], key: str, lo: int, hi: int, default: int) -> int:
    value = given.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise _bad(f"{key} must be an integer from {lo} to {hi}")
    return value


def _turn_number(given: Mapping[str, Any], key: str) -> int | None:
    value = given.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value == 0:
        raise _bad(f"{key} must be a turn number: 1 for the first turn, -1 for the latest")
    return value


def _roles(given: Mapping[str, Any]) -> tuple[str, ...] | None:
    value = given.get("roles")
    if value is None:
        return None
    if not isinstance(value, list) or not value or not set(value) <= ROLES:
        raise _bad(f"roles must be a list drawn from {', '.join(sorted(ROLES))}")
    return tuple(value)


def _time(given: Mapping[str, Any], key: str) -> int | None:
    value = _str(given, key, 64)
    if value is None:
        return None
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        raise _bad(f"{key} must be an ISO 8601 time such as 2024-05-01T14:30Z") from None
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return int(at.timestamp() * 1000)


# -- the answers -------------------------------------------------------------


def _answer(req: Request, found: Found) -> Answer:
    if isinstance(found, Searched):
        return _search(req, found)
    if isinstance(found, Summary):
        return _summary(found)
    assert req.session is not None  # parse_arguments: only search reads all sessions
    if req.action == "range":
        return _range(req.session, found)
    return _tool_calls(req, req.session, found)


def _search(req: Request, found: Searched) -> Answer:
    query = req.query
    assert query is not None  # parse_arguments checked
    scope = "all sessions" if req.session is None else f"session {req.session}"
    if found.also:
        scope += f" and this person's other sessions ({', '.join(found.also)})"
    hits = found.hits
    note = " No message has all the words; these have some of them." if found.some_words else ""
    if not hits:
        return Answer(f"No messages in {scope} match {query!r}.", [])
    where = "session (if not this one), " if req.session is None or found.also else ""
    header = (
        f"{len(hits)} messages in {scope} match {query!r}, best first.{note}"
        f" Lines: time (UTC), {where}turn, role: snippet."
    )
    blocks = [
        Block(_hit_line(h, h.session != req.session), _around(found.around.get(h.turn, ())))
        for h in hits
    ]
    return Answer(header, blocks, "To read a whole turn: action 'range' with around_turn.")


def _hit_line(hit: Hit, with_session: bool) -> str:
    where = f"{hit.session} " if with_session else ""
    return f"{_when(hit.at)} {where}{hit.turn} {hit.role}: {_one_line(hit.snippet)}"


def _around(turns: Iterable[Neighbour]) -> str:
    """A hit's neighbouring turns, one line each, the one before it first."""
    lines = []
    for n in sorted(turns, key=lambda n: n.offset):
        side = "before" if n.offset < 0 else "after"
        lines.append(f"  {side} {n.turn}: user: {n.said} | reply: {n.answered}")
    return "\n".join(lines)


def _range(session: str, entries: list[Entry]) -> Answer:
    if not entries:
        return Answer(f"Session {session} has no turns in that range.", [])
    started: dict[str, int] = {}
    blocks = []
    for e in entries:
        at = started.setdefault(e.turn, e.at)
        status = "" if e.turn_status == "completed" else f" ({e.turn_status})"
        number = "" if e.number is None else f"#{e.number} "
        other = f" of {e.session}" if e.session != session else ""
        group = f"-- turn {number}{e.turn}{other} {_when(at)}{status}"
        blocks.append(replace(_entry_block(e), group=group))
    header = f"Session {session}, {len(entries)} entries, oldest first (times UTC):"
    return Answer(header, blocks, oldest_first=True)


def _entry_block(e: Entry) -> Block:
    if e.tool is None:
        return Block(f"{e.role}:", clip(e.content, MESSAGE_MAX))
    args = _one_line(clip(e.arguments or "", ARGS_MAX))
    return Block(f"tool {e.tool} {args} -> {e.status}:", clip(e.content, RESULT_MAX), tool=True)


def _tool_calls(req: Request, session: str, calls: list[Entry]) -> Answer:
    which = f"calls of {req.tool_name}" if req.tool_name else "tool calls"
    if not calls:
        return Answer(f"Session {session} has no {which}.", [])
    blocks = [
        Block(
            f"{_when(c.at)} {c.turn} {c.tool} {_one_line(clip(c.arguments or '', ARGS_MAX))}"
            f" -> {c.status}:",
            clip(c.content, RESULT_MAX),
            tool=True,
        )
        for c in calls
    ]
    return Answer(f"The latest {len(calls)} {which} in session {session}, newest first:", blocks)


def _summary(s: Summary) -> Answer:
    t = s.totals
    lines = [
        f"Session {s.session} ({s.kind}, {s.status}), created {_when(s.created_at)} UTC.",
        f"{s.turns} turns, {s.messages} messages, {s.tool_calls} tool calls;"
        f" first {_when(s.first_at)}, last {_when(s.last_at)}.",
        f"Tokens: {t['prompt_tokens']} prompt, {t['completion_tokens']} completion;"
        f" {t['model_calls']} model calls, {t['files_modified']} files modified,"
        f" {t['errors']} errors ({t['errors_resolved']} resolved).",
    ]
    blocks = []
    if s.compaction is not None:
        c = s.compaction
        blocks.append(
            Block(
                f"Latest compaction summary ({_when(c.at)}, {c.turns_summarized} turns"
                f" through {c.through_turn}):",
                c.summary,
            )
        )
    if s.scratchpad is not None:
        blocks.append(Block("Scratchpad:", s.scratchpad))
    state = render(s.state, s.session)
    if state is not None:
        blocks.append(Block("State record of the current thread:", state))
    if s.related:
        others = ", ".join(f"{label} ({turns} turns)" for label, turns in s.related)
        lines.append(f"This person's other sessions, also searched: {others}.")
    return Answer("\n".join(lines), blocks)


# -- formatting --------------------------------------------------------------


def _when(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M")


def _one_line(text: str) -> str:
    return " ".join(text.split())


def clip(text: str, limit: int) -> str:
    """`text` cut to about `limit` characters: its start and its end, the middle noted."""
    if len(text) <= limit:
        return text
    head = limit * 3 // 4
    tail = limit - head
    return f"{text[:head]}\n[... {len(text) - head - tail} characters cut ...]\n{text[-tail:]}"


def fit(answer: Answer, count_tokens: Callable[[str], int], budget: int) -> str:
    """The answer's text, cut to `budget` tokens: tool results, then messages, then entries."""
    text = answer.text()
    if count_tokens(text) <= budget:
        return text
    return _Fitter(answer, count_tokens, budget).run()


class _Fitter:
    """Shrinks an answer step by step on a running token estimate (the sum of the
    parts), then checks the joined text and leaves out more if it was low."""

    def __init__(self, answer: Answer, count: Callable[[str], int], budget: int) -> None:
        self.answer, self.count, self.budget = answer, count, budget
        self.blocks: list[Block | None] = list(answer.blocks)
        self.costs = [count(b.text()) + 1 for b in answer.blocks]
        # The note, the newlines, and a line for each turn of a range.
        groups = len({b.group for b in answer.blocks})
        self.fixed = count(answer.header) + count(answer.footer) + 40 + 20 * groups
        self.cut = self.dropped = 0
        n = len(self.blocks)
        # Oldest first: range lists the oldest first; search and tool_calls list the
        # best or the newest first, so their last entries go first.
        self.order = list(range(n)) if answer.oldest_first else list(reversed(range(n)))

    def total(self) -> int:
        return self.fixed + sum(self.costs)

    def run(self) -> str:
        tools = [i for i in self.order if self.answer.blocks[i].tool]
        self._shrink(sorted(tools, key=lambda i: -self.costs[i]))
        self._shrink([i for i in self.order if not self.answer.blocks[i].tool])
        for i in self.order:
            if self.total() <= self.budget:
                break
            self._drop(i)
        for i in [*self.order, -1]:
            text = self._text()
            if self.count(text) <= self.budget:
                return text
            if i >= 0:
                self._drop(i)
        return text[: self.budget]  # the header alone is over a tiny budget

    def _shrink(self, indexes: list[int]) -> None:
        for i in indexes:
            block = self.blocks[i]
            if self.total() <= self.budget:
                return
            if block is None or len(block.body) <= CUT:
                continue
            short = replace(block, body=clip(block.body, CUT))
            self.blocks[i], self.costs[i] = short, self.count(short.text()) + 1
            self.cut += 1

    def _drop(self, i: int) -> None:
        if self.blocks[i] is not None:
            self.blocks[i], self.costs[i] = None, 0
            self.dropped += 1

    def _text(self) -> str:
        which = "oldest" if self.answer.oldest_first else "last"
        note = (
            f"[Cut to fit {self.budget} tokens: {self.cut} entries shortened, the {which}"
            f" {self.dropped} left out. Ask for fewer (limit) or a narrower range.]"
        )
        return self.answer.text([b for b in self.blocks if b is not None], note)
