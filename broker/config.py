"""Settings: a TOML file plus BROKER_* environment overrides.

`brokerd --config PATH` (or BROKER_CONFIG) names the file; environment
variables win over it, with `__` for nesting (BROKER_LEDGER__SYNCHRONOUS=FULL).
An invalid file or value stops the daemon at start with a message naming the
key and exit status 78 (EX_CONFIG), which systemd is told not to restart on.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from core.closing import IdleClose
from core.queue_machine import QueueMode
from core.resets import ResetPolicy, parse_daily_at
from ledger.port import cipher
from plumbing import redact
from plumbing.redact import check_pattern
from policies.model import Owner, Rule, RulesFile

EX_CONFIG = 78
CHANNEL_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,31}$"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LedgerSettings(_Section):
    """`[ledger]`: where messages and turns are stored. Every key is read at start only."""

    path: Path = Field(Path("var/ledger.db"), description="The SQLite ledger file.")
    synchronous: Literal["NORMAL", "FULL"] = Field(
        "NORMAL",
        description="SQLite's `synchronous` in WAL mode. `NORMAL` keeps every acked message"
        " through a crash or kill of the process; `FULL` also through a power loss, at the"
        " cost of an fsync per group commit.",
    )
    readers: int = Field(2, ge=1, le=16, description="Read connections beside the writer.")
    writer: Literal["process", "thread"] = Field(
        "process",
        description="Where write transactions run: `process`, a child process with its own"
        " GIL (`ledger/writer/process.py`); `thread`, a thread of the daemon (slower under"
        " load). If the writer process dies, the daemon stops; a restart recovers everything"
        " acked.",
    )
    write_fail_exit_s: float = Field(
        60.0,
        gt=0,
        description="Writes the storage refuses (disk full, I/O error) wait and run again, in"
        " order, until they commit; meanwhile new messages are `overloaded` and `health` says"
        " why. If nothing can be written for this long, the daemon exits 74 (EX_IOERR) for"
        " its supervisor to restart it.",
    )
    check_s: float = Field(
        10.0,
        ge=0,
        description="SQLite's `quick_check` at start stops after this long, with a warning"
        " that the rest is unchecked; 0 skips it.",
    )
    writer_queue: int = Field(
        100_000,
        ge=1,
        le=10_000_000,
        description="Writes that may wait for the writer. Past it an inbound message (or a"
        " turn's commit, a reaction, a delivery confirmation) waits for room, and its"
        " connection's reader stops reading meanwhile.",
    )
    writer_wait_s: float = Field(
        10.0,
        ge=0,
        le=3600,
        description="How long a write waits for room in `writer_queue`; then the frame is"
        " answered `overloaded` and stores nothing.",
    )
    kind: Literal["sqlite", "postgres"] = Field(
        "sqlite",
        description="`postgres` keeps the ledger in the database `dsn` names (extra"
        " `postgres`; `docs/cluster.md`); `path`, `synchronous`, `writer` and `check_s` are"
        " then unused.",
    )
    dsn: str | None = Field(
        None,
        description="`postgresql://user[:password]@host[:port]/dbname`; needed when `kind ="
        ' "postgres"`.',
    )
    key_file: Path | None = Field(
        None,
        description="A file holding the key that encrypts the SQLite ledger, its WAL and its"
        " backups (extra `encryption`; `docs/forgetting.md`): owned by the daemon's user, mode"
        " 0600 or 0400, 64 hex digits or a passphrase of at least 16 characters. Unset or"
        ' "": a plain ledger. Refused with `kind = "postgres"`.',
    )

    @model_validator(mode="after")
    def _postgres_has_a_dsn(self) -> LedgerSettings:
        if self.kind == "postgres" and not self.dsn:
            raise ValueError('[ledger] kind = "postgres" needs dsn = "postgresql://..."')
        return self

    @model_validator(mode="after")
    def _key_file_is_usable(self) -> LedgerSettings:
        if self.key_file == Path(""):
            self.key_file = None
        if self.key_file is None:
            return self
        if self.kind == "postgres":
            raise ValueError(
                "[ledger] key_file encrypts the SQLite ledger; with PostgreSQL encryption at"
                " rest is the database's (TDE or an encrypted disk): remove key_file"
            )
        try:
            cipher.driver()
            cipher.read_key(self.key_file)
        except cipher.KeyFileError as exc:
            raise ValueError(f"[ledger] key_file: {exc}") from exc
        return self

    def key(self) -> cipher.Key | None:
        """The ledger's key, read from `key_file` (checked again), or None."""
        if self.key_file is None:
            return None
        try:
            return cipher.read_key(self.key_file)
        except cipher.KeyFileError as exc:
            raise ConfigError(f"[ledger] key_file: {exc}") from exc


# Engines that run code the operator brings (docs/engines.md): their [engine] table may
# hold keys of its own, which a python engine's factory receives.
CODE_ENGINES = ("python", "openai-agents", "adk", "langgraph")


class EngineSettings(_Section):
    """`[engine]`: what produces a reply (`docs/engines.md`). The same keys make each
    named engine of `[engines.<name>]`. An engine of a kind that runs the operator's
    code (`python`, `openai-agents`, `adk`, `langgraph`) may hold keys of its own,
    which its factory receives."""

    model_config = ConfigDict(extra="allow")
    kind: Literal["echo", "subprocess", "openai", "python", "openai-agents", "adk", "langgraph"] = (
        Field(
            "echo",
            description="`echo` (built in, deterministic), `subprocess` (a program speaking"
            " JSON lines, `command`), `openai` (an OpenAI-compatible chat-completions"
            " server), or code the operator brings: `python` (`entry`), `openai-agents` and"
            " `adk` (`agent`), `langgraph` (`graph`).",
        )
    )
    chunks: int = Field(3, ge=1, le=1000, description="`echo`: deltas a reply streams in.")
    workspace: str = Field(
        "",
        description="The folder the engine works in, if any (a git checkout): each turn's"
        " start `snapshot` event records its git HEAD, branch, dirty and staged files. An"
        " engine object may report its own with a `workspace` attribute.",
    )
    delay_ms: int = Field(0, ge=0, le=60_000, description="`echo`: pause between deltas.")
    timeout_s: float = Field(
        120.0,
        gt=0,
        description="Bound on one engine call; past it the turn fails and the person gets a"
        " `deliver` of status `failed`.",
    )
    progress_save_s: float = Field(
        1.0,
        gt=0,
        description="A turn that streams longer than this saves its partial output this"
        " often, so a crash keeps what it had said.",
    )
    context_window: int = Field(8192, ge=256, description="The model's window, in tokens.")
    encoding: str = Field(
        "cl100k_base", description="The tiktoken encoding tokens are counted in (offline)."
    )
    reserve_reply_tokens: int = Field(
        1024, ge=0, description="Tokens of the window kept free for the reply."
    )
    compaction_threshold: float = Field(
        0.85,
        gt=0,
        le=1,
        description="Share of the window past which a turn is preceded by a compaction.",
    )
    keep_recent_ratio: float = Field(
        0.3, ge=0, lt=1, description="Share of the window a compaction keeps verbatim."
    )
    compaction_timeout_s: float = Field(
        60.0,
        gt=0,
        description="A summarizer that fails or takes longer is replaced by a deterministic"
        " summary.",
    )
    compaction_model: str | None = Field(
        None,
        description="The model a compaction asks for (a cheaper one, say); unset: the turns'"
        " model. A persona's own `compaction_model` wins.",
    )
    command: list[str] = Field(
        default_factory=list, description="`subprocess`: the program and its arguments."
    )
    base_url: str | None = Field(
        None,
        description="`openai`: the server's URL; unset: the OpenAI library's default (its"
        " own API, or `OPENAI_BASE_URL`).",
    )
    model: str = Field("gpt-4o-mini", description="`openai`: the model asked for.")
    api_key: str | None = Field(
        None,
        description="`openai`: the key sent to the server; unset: `OPENAI_API_KEY`, or a"
        " placeholder when `base_url` names a local server.",
    )
    entry: str | None = Field(None, description='`python`: `"module:attribute"`.')
    agent: str | None = Field(
        None, description='`openai-agents` and `adk`: the agent, `"module:attribute"`.'
    )
    graph: str | None = Field(
        None, description='`langgraph`: a compiled graph, `"module:attribute"`.'
    )

    @model_validator(mode="after")
    def _own_keys_for_code(self) -> EngineSettings:
        extra = sorted(self.model_extra or {})
        if extra and self.kind not in CODE_ENGINES:
            raise ValueError(
                f"unknown key(s) {', '.join(extra)}: only engines of kind"
                f" {', '.join(CODE_ENGINES)} take keys of their own"
            )
        return self

    @field_validator("api_key")
    @classmethod
    def _api_key_fits_a_header(cls, value: str | None) -> str | None:
        # It goes into an HTTP header: printable ASCII, else every turn would fail.
        if value is not None and not all(" " < ch <= "~" for ch in value):
            raise ValueError(
                "the key must be printable ASCII without spaces (it goes into an HTTP"
                " header); was a placeholder such as 'sk-…' copied?"
            )
        return value

    @model_validator(mode="after")
    def _subprocess_has_a_command(self) -> EngineSettings:
        if self.kind == "subprocess" and not self.command:
            raise ValueError('kind = "subprocess" needs command = ["program", "arg", ...]')
        return self


class McpServerSettings(_Section):
    """One MCP server whose tools engines are offered (docs/mcp.md)."""

    name: str = Field(
        pattern=r"^[A-Za-z0-9_-]{1,64}$", description="Its name, for route rules' `mcp`."
    )
    command: list[str] = Field(
        default_factory=list, description="A stdio server: its command line."
    )
    url: str | None = Field(
        None,
        description='Or a streamable HTTP server: its URL, `"http://127.0.0.1:8000/mcp"`.',
    )
    allow: list[str] = Field(
        default_factory=list, description="The tools offered, by the server's names for them."
    )

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerSettings:
        if bool(self.command) == bool(self.url):
            raise ValueError(f"MCP server {self.name!r}: set either command or url")
        return self


class McpSettings(_Section):
    """`[mcp]`: tools from MCP servers, offered to engines (docs/mcp.md)."""

    servers: list[McpServerSettings] = Field(
        default_factory=list, description="The MCP servers, each with its own tools."
    )

    @model_validator(mode="after")
    def _distinct(self) -> McpSettings:
        owner: dict[str, str] = {}
        for server in self.servers:
            if server.name in {s.name for s in self.servers if s is not server}:
                raise ValueError(f"two MCP servers are named {server.name!r}")
            for tool in server.allow:
                if tool in owner and owner[tool] != server.name:
                    raise ValueError(
                        f"the tool {tool!r} is allowed from both MCP servers"
                        f" {owner[tool]!r} and {server.name!r}"
                    )
                owner[tool] = server.name
        return self


class AuthSettings(_Section):
    """`[auth]`: who may connect to the socket, checked by peer credentials (SO_PEERCRED)."""

    allowed_uids: list[int] | None = Field(
        None, description="Peer uids allowed; unset: the broker's own uid only."
    )
    allowed_gids: list[int] | None = Field(
        None, description="Peer gids allowed; unset: the broker's own gid only."
    )
    channel_tokens: dict[str, str] = Field(
        default_factory=dict,
        description="Channel name -> the token its adapter must present in its `hello`.",
    )
    require_token: bool = Field(
        False, description="true: a channel with no entry in `channel_tokens` is refused."
    )

    @field_validator("channel_tokens")
    @classmethod
    def _channel_names(cls, value: dict[str, str]) -> dict[str, str]:
        import re

        for name in value:
            if not re.fullmatch(CHANNEL_PATTERN, name):
                raise ValueError(f"channel name {name!r} must match {CHANNEL_PATTERN}")
        return value


class LoggingSettings(_Section):
    """`[logging]`: what log lines and error messages never show."""

    redact: list[str] = Field(
        default_factory=list,
        description="Patterns (Python regular expressions) of the operator's secrets,"
        ' replaced by "[redacted]" in log lines and error messages beside the built-in ones'
        " (`plumbing/redact.py`).",
    )

    @field_validator("redact")
    @classmethod
    def _compiles(cls, value: list[str]) -> list[str]:
        return [check_pattern(p) for p in value]


OperatorRole = Literal["read", "operate", "admin"]


class OperatorUid(_Section):
    """One operator's uid and role."""

    uid: int = Field(ge=0, description="The peer's uid on the socket.")
    role: OperatorRole = Field(description="`read`, `operate` or `admin`.")


class OperatorSettings(_Section):
    """`[operators]`: the role of each peer uid (broker/ops/roles.py); uid 0 and the
    daemon's own uid are `admin` whatever this says."""

    default_role: OperatorRole = Field(
        "operate", description="The role of a peer uid not in `uids`."
    )
    uids: list[OperatorUid] = Field(default_factory=list, description="Roles by uid.")

    def roles(self) -> dict[int, OperatorRole]:
        return {u.uid: u.role for u in self.uids}


class QueueSettings(_Section):
    """`[queue]`: what a message does to a busy session (`docs/turns.md`)."""

    debounce_ms: int = Field(
        1500,
        ge=0,
        le=600_000,
        description="`collect` mode: the quiet period after which the batch runs as one turn.",
    )
    cap: int | None = Field(100, ge=1, description="Waiting items a session keeps at most.")
    drop: Literal["old", "new", "summarize"] = Field(
        "old",
        description="Past `cap`: drop the oldest or the newest waiting item, or summarize the"
        " dropped ones into a note for the next turn. Dropped items keep their reason.",
    )
    person_mode: QueueMode = Field(
        "interrupt", description="The mode of a person's message that names none."
    )
    worker_mode: QueueMode = Field(
        "followup", description="The mode of a worker result or a timer's item."
    )
    idle_stop_s: float = Field(
        30.0, gt=0, description="A session's actor retires after this long with nothing to do."
    )
    stuck_after_s: float = Field(
        60.0,
        gt=0,
        description="A queued or running item no live actor has held for this long is stuck"
        " (`health`, `doctor`).",
    )


class WorkerSettings(_Section):
    """`[workers]`: sessions an agent starts with `agent_send`."""

    max_depth: int = Field(
        2, ge=1, le=10, description="How deep workers may nest (a worker's worker's ...)."
    )
    max_children: int = Field(
        8, ge=1, le=1000, description="Workers a session may have running at once."
    )
    timeout_s: float = Field(
        600.0,
        gt=0,
        description="A task not finished by then ends; its `worker_result` says it timed out.",
    )
    persona: str | None = Field(
        None, description="A persona (in `[personas]`) for workers; unset: `system_prompt`."
    )
    system_prompt: str = Field(
        description="A worker's system prompt when `persona` is unset.",
        default=(
            "You are a worker agent. Another agent dispatched the task below to you. Do it, "
            "then reply with the result only: it goes back to the agent that asked. If the "
            "task takes you several turns (you wait for workers of your own or a timer), "
            "give the result with the worker_done tool when it is ready."
        ),
    )


class RecallSettings(_Section):
    """`[recall]`: the `conversation_recall` tool and the recall hint."""

    budget_tokens: int = Field(
        8000, ge=256, description="Tokens of the `conversation_recall` tool's output at most."
    )
    cross_session: bool = Field(
        False,
        description='May an agent\'s `conversation_recall` read any session (`"*"`, or another'
        " label)? false: only its own session and its person's other DM sessions.",
    )
    neighbours_before: int = Field(
        1, ge=0, le=5, description="Turns shown before each hit, on its thread."
    )
    neighbours_after: int = Field(
        1, ge=0, le=5, description="Turns shown after each hit, on its thread."
    )
    hint: bool = Field(
        True,
        description="A one-line note to a turn whose message names something that only older"
        " turns, left out of its context, hold.",
    )
    model_dir: str = Field(
        "auto",
        description="Recall by meaning (`conversation_recall` mode `meaning` or `both`): a"
        " sentence-transformers BERT folder (`config.json`, `model.safetensors`,"
        ' `tokenizer.json`); "auto": the all-MiniLM-L6-v2 the `semantic` extra installs,'
        ' when it is installed; "": off (messages are not embedded).',
    )


class SnapshotSettings(_Section):
    """`[snapshots]`: files engines report changing."""

    max_bytes: int = Field(
        8 << 20,
        ge=0,
        le=1 << 30,
        description="A file content over this is recorded by its sha256 and size only, with"
        " a note; applies on reload.",
    )


class RetentionSettings(_Section):
    """`[retention]`: how long turns keep their content (`broker/retention.py`)."""

    keep_days: float = Field(
        0.0,
        ge=0,
        description="Turns that ended longer ago than this many days become stubs (their"
        " text goes, to the bytes); every session's head and latest compaction stay. Checked"
        " at start, then hourly; 0 keeps everything (`docs/forgetting.md`).",
    )


class ClosingSettings(_Section):
    """`[closing]`: sessions that close by themselves after a person's silence
    (`broker/idle_close.py`); `session.close` closes one at any time."""

    idle_s: float = Field(
        0.0,
        ge=0,
        description="A session no person has written to for this long closes, as"
        " `session.close` closes it, with a summary of its turn titles; its next message"
        " opens a session extending it. A persona's `close_idle_s` overrides it; 0: never.",
    )
    every_s: float = Field(
        60.0,
        gt=0,
        le=86_400,
        description="How often the daemon looks for idle sessions; both keys apply on reload.",
    )

    def policy(self, personas: dict[str, Persona]) -> IdleClose:
        own = tuple(
            (name, p.close_idle_s) for name, p in personas.items() if p.close_idle_s is not None
        )
        return IdleClose(self.idle_s, own)


# -- [reset]: when a session's thread rolls over (core/resets.py) ---------------


def check_timezone(name: str) -> str:
    """An IANA zone name the zone database knows, else ValueError."""
    import zoneinfo

    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"unknown timezone {name!r} (an IANA name: 'Europe/Berlin')") from exc
    return name


class ResetSettings(_Section):
    """`[reset]`: when a session's thread rolls over on its own (`/new` always does). A
    route rule's `reset` overrides these key by key."""

    idle_s: float = Field(
        0.0, ge=0, description="A message after this much silence starts a thread; 0: never."
    )
    daily_at: str = Field(
        "",
        description='`"HH:MM"`: the first message after this local time each day starts a'
        ' thread; "": never.',
    )
    timezone: str = Field("UTC", description="The IANA zone of `daily_at`.")
    max_turns: int = Field(
        0, ge=0, description="A thread that reached this many turns rolls over; 0: never."
    )

    @field_validator("daily_at")
    @classmethod
    def _hh_mm(cls, value: str) -> str:
        parse_daily_at(value)
        return value

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        return check_timezone(value)

    def policy(self) -> ResetPolicy:
        return ResetPolicy(self.idle_s, self.daily_at, self.timezone, self.max_turns)


class TitleSettings(_Section):
    """`[titles]`: a cheap model titling each turn after it, never delaying the next. Read
    at start only."""

    engine: str = Field(
        "",
        description='An engine in `[engines]` that writes each turn\'s title; "": off, the'
        " title stays the mechanical one (or the engine's, from an `intent` event).",
    )
    timeout_s: float = Field(
        10.0, gt=0, le=600, description="Per title; past it the title stays as it was."
    )
    queue: int = Field(
        1000, ge=1, le=100_000, description="Turns waiting for a title; past it, skipped."
    )


class Persona(_Section):
    """`[personas.<name>]`: who the agent is for a route rule's `session.persona`."""

    engine: str | None = Field(
        None, description="An engine in `[engines]`; unset: the default `[engine]`."
    )
    system_prompt: str | None = Field(None, description="The prompt every turn begins with.")
    model: str | None = Field(None, description="The model asked for; unset: the engine's.")
    context_window: int | None = Field(
        None, ge=256, description="Tokens; unset: the engine's `context_window`."
    )
    compaction_model: str | None = Field(
        None, description="Unset: its engine's `compaction_model`."
    )
    close_idle_s: float | None = Field(
        None,
        ge=0,
        description="As `[closing] idle_s`, for this persona's sessions; 0: never; unset:"
        " `[closing] idle_s`.",
    )
    context_mode: Literal["verbatim", "summary"] = Field(
        "verbatim",
        description="`verbatim`: as many recent turns as fit, as they were; `summary`: the"
        " newest `verbatim_turns` as they were and, in place of the older ones, the mechanical"
        " summaries of the last `summary_turns` of them (docs/turns.md), with the recall hint"
        " looked for whatever `recall.hint` says.",
    )
    summary_turns: int = Field(
        5, ge=0, le=100, description="Turn summaries at most in a `summary`-mode context."
    )
    verbatim_turns: int = Field(
        2, ge=0, le=100, description="The newest turns a `summary`-mode context keeps verbatim."
    )


class RuntimeSettings(_Section):
    """`[runtime]`: where sessions run (docs/cluster.md "Sessions on Temporal")."""

    kind: Literal["local", "temporal"] = Field(
        "local",
        description="`local`: in-process actors; `temporal`: each session a Temporal workflow"
        ' (extra `temporal`; needs `ledger.kind = "postgres"`).',
    )
    address: str = Field("127.0.0.1:7233", description="The Temporal server, `host:port`.")
    namespace: str = Field("default", description="The Temporal namespace.")
    task_queue: str = Field("broker", description="The task queue every node serves.")
    connect_timeout_s: float = Field(
        5.0,
        gt=0,
        le=300,
        description="Bound on reaching Temporal at start; past it the daemon exits 69.",
    )
    heartbeat_timeout_s: float = Field(
        5.0,
        gt=0,
        le=3600,
        description="A turn activity that has not heartbeat for this long is given to another"
        " worker.",
    )
    allow_local_ledger: bool = Field(
        False,
        description="Run on a SQLite ledger: a single node only, for tests and a demo (a"
        " cluster shares one ledger).",
    )
    metrics_address: str = Field(
        "",
        description='`"host:port"` where the node serves its Temporal worker metrics for'
        ' Prometheus (task latencies, cache hits, the sessions\' replays); "": none.',
    )
    history_max_events: int = Field(
        120,
        ge=0,
        le=50_000,
        description="A session's workflow run goes on as a new run, between two turns, once"
        " its history holds this many events, so a node taking it over replays a short"
        " history; 0 leaves it to Temporal's suggestion.",
    )
    workflow_sandbox: bool = Field(
        False,
        description="true runs the session workflows in Temporal's sandbox, which restricts"
        " none of the broker's calls and costs CPU a turn (`docs/performance.md`).",
    )


class ClusterSettings(_Section):
    """`[cluster]`: several nodes on one ledger (docs/cluster.md "Two and more nodes").
    Used on the Temporal runtime only: a local node sends its replies itself. Read at
    start only."""

    outbox_poll_ms: int = Field(
        100,
        ge=5,
        le=60_000,
        description="How often the node looks in the ledger for pending replies of its"
        " adapters' channels.",
    )
    claim_lease_ms: int = Field(
        5_000,
        ge=100,
        le=3_600_000,
        description="A node's claim on a reply it sent; past it another node may send it again.",
    )


class MetricsSettings(_Section):
    """`[metrics]`: Prometheus text at GET /metrics (broker/observe/metrics.py)."""

    address: str = Field("", description='`"127.0.0.1:9108"`, or a Unix socket path; "": off.')


class TracingSettings(_Section):
    """`[tracing]`: OpenTelemetry traces over OTLP/HTTP (broker/observe/tracing.py)."""

    otlp_endpoint: str = Field(
        "", description='Where spans go, `"http://127.0.0.1:4318"`; "": off.'
    )
    capture_content: bool = Field(False, description="Message text in the spans.")

    @field_validator("otlp_endpoint")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if value and not value.startswith(("http://", "https://")):
            raise ValueError('expected an http(s) URL, as "http://127.0.0.1:4318"')
        return value


class ConsoleSettings(_Section):
    """`[console]`: the web console (broker/console/)."""

    address: str = Field("", description='`"127.0.0.1:8765"`, or a Unix socket path; "": off.')
    token_file: Path | None = Field(
        None, description='Needed with `address`: lines of `"<role> <token>"`.'
    )

    @model_validator(mode="after")
    def _tokens_when_served(self) -> ConsoleSettings:
        if self.address and self.token_file is None:
            raise ValueError("console.address needs console.token_file")
        return self


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="BROKER_", env_nested_delimiter="__", extra="forbid", validate_default=True
    )

    server_name: str = Field("brokerd", description="The name the `welcome` frame gives.")
    socket_path: Path = Field(
        Path("var/broker.sock"), description="The Unix socket adapters and operators use."
    )
    socket_mode: int = Field(
        0o660, ge=0, le=0o777, description="The socket's file mode (write it `0o660` in TOML)."
    )
    max_frame_bytes: int = Field(
        1 << 20,
        ge=1024,
        le=64 << 20,
        description="A longer line is answered `frame_too_large` and closes its connection;"
        " on reload, applies to connections made after it.",
    )
    max_text_bytes: int = Field(
        256 << 10, ge=16, le=32 << 20, description="Message text longer than this is `invalid`."
    )
    max_inflight: int = Field(
        1024,
        ge=1,
        le=1_000_000,
        description="Inbound frames of one connection awaiting their commit; past it,"
        " `overloaded`.",
    )
    max_pending_bytes: int = Field(
        64 << 20,
        ge=1024,
        le=1 << 40,
        description="Bytes of inbound frames, over all connections, handed to the ledger"
        " writer and not yet committed; a frame that would pass it is answered `overloaded`"
        " and stores nothing. At least `max_frame_bytes`.",
    )
    frame_timeout_s: float = Field(
        30.0,
        gt=0,
        le=86_400,
        description="A frame begun and not finished (no newline) this long after its first"
        " byte closes its connection; a connection with nothing half sent may idle for hours.",
    )
    shutdown_grace_s: float = Field(
        10.0,
        ge=0,
        description="On SIGTERM, running turns get this long to finish; the rest are aborted"
        " (reason `shutdown`) and run again after the next start.",
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        "info", description="The lowest level logged."
    )
    log_format: Literal["json", "console"] = Field(
        "json",
        description="`json`: one object a line on stderr; `console`: for a person at a terminal.",
    )
    ledger: LedgerSettings = LedgerSettings()
    engine: EngineSettings = EngineSettings()
    auth: AuthSettings = AuthSettings()
    operators: OperatorSettings = OperatorSettings()
    logging: LoggingSettings = LoggingSettings()
    queue: QueueSettings = QueueSettings()
    owners: list[Owner] = Field(
        default_factory=list,
        description='The people whose messages match a rule\'s `principal = ["owner"]`.',
    )
    routes: list[Rule] = Field(
        default_factory=list,
        description="Route rules inline, tried first to last; or see `policies_file`.",
    )
    policies_file: Path | None = Field(
        None, description="A TOML file of `[[rules]]`, each a route rule."
    )
    personas: dict[str, Persona] = Field(
        default_factory=dict, description="Named personas a route rule may pick."
    )
    engines: dict[str, EngineSettings] = Field(
        default_factory=dict, description="Named engines, for personas and `[titles]`."
    )
    workers: WorkerSettings = WorkerSettings()
    recall: RecallSettings = RecallSettings()
    snapshots: SnapshotSettings = SnapshotSettings()
    retention: RetentionSettings = RetentionSettings()
    reset: ResetSettings = ResetSettings()
    closing: ClosingSettings = ClosingSettings()

    titles: TitleSettings = TitleSettings()
    node_id: str = Field(
        "", max_length=64, description="Unique per node of a cluster; shown in `health`."
    )
    runtime: RuntimeSettings = RuntimeSettings()
    cluster: ClusterSettings = ClusterSettings()
    metrics: MetricsSettings = MetricsSettings()
    tracing: TracingSettings = TracingSettings()
    console: ConsoleSettings = ConsoleSettings()
    mcp: McpSettings = McpSettings()

    @field_validator("socket_path")
    @classmethod
    def _fits_sun_path(cls, value: Path) -> Path:
        # sockaddr_un holds 108 bytes including the terminating NUL.
        if len(os.fsencode(value.absolute())) > 107:
            raise ValueError("the socket path is longer than the 107 bytes a Unix socket allows")
        return value

    @model_validator(mode="after")
    def _a_whole_frame_can_pend(self) -> Settings:
        if self.max_pending_bytes < self.max_frame_bytes:
            raise ValueError(
                f"max_pending_bytes ({self.max_pending_bytes}) is less than max_frame_bytes"
                f" ({self.max_frame_bytes}): the largest frame allowed could never be accepted"
            )
        return self

    @model_validator(mode="after")
    def _a_cluster_shares_its_ledger(self) -> Settings:
        # `ledger.kind` comes with the PostgreSQL backend; without it the ledger is a file.
        ledger_kind = getattr(self.ledger, "kind", "sqlite")
        rt = self.runtime
        if rt.kind == "temporal" and ledger_kind == "sqlite" and not rt.allow_local_ledger:
            raise ValueError(
                'runtime.kind = "temporal" needs ledger.kind = "postgres": the nodes of a'
                " cluster share one ledger, and a SQLite file belongs to one machine"
                " (runtime.allow_local_ledger = true runs a single node, for tests)"
            )
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The environment overrides the file, which arrives as init values.
        return (env_settings, init_settings)


def secrets_of(settings: Settings) -> list[str]:
    """The secrets the configuration holds, for the redactor: channel tokens, engine keys."""
    keys = [settings.engine.api_key, *(e.api_key for e in settings.engines.values())]
    return [*settings.auth.channel_tokens.values(), *(k for k in keys if k)]


def configure_redaction(settings: Settings) -> None:
    """Have log lines and error messages redact this configuration's secrets."""
    redact.configure(secrets_of(settings), settings.logging.redact)


class ConfigError(Exception):
    """The configuration cannot be used; the message names the key at fault."""


def config_path(explicit: Path | None) -> Path | None:
    if explicit is not None:
        return explicit
    env = os.environ.get("BROKER_CONFIG")
    return Path(env) if env else None


def load_settings(path: Path | None = None, **overrides: Any) -> Settings:
    """Load settings from `path` (or BROKER_CONFIG) and the environment."""
    data: dict[str, Any] = {}
    path = config_path(path)
    if path is not None:
        try:
            with path.open("rb") as fh:
                data = tomllib.load(fh)
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc
    data.update(overrides)
    try:
        return Settings(**data)
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(exc, path, data)) from exc


def describe_validation_error(
    exc: ValidationError, path: Path | None, data: dict[str, Any] | None = None
) -> str:
    where = f" in {path}" if path else ""
    lines = [f"invalid configuration{where}:"]
    for err in exc.errors():
        loc = err["loc"]
        key = ".".join(str(part) for part in loc) or "(root)"
        lines.append(f"  {key}{_rule_name(loc, data)}: {err['msg']}")
    return "\n".join(lines)


def _rule_name(loc: tuple[int | str, ...], data: dict[str, Any] | None) -> str:
    """' (rule "name")' for an error inside a route rule, so the message names the rule."""
    if data is None or len(loc) < 2 or loc[0] != "routes" or not isinstance(loc[1], int):
        return ""
    routes = data.get("routes")
    if isinstance(routes, list) and loc[1] < len(routes) and isinstance(routes[loc[1]], dict):
        name = routes[loc[1]].get("name")
        if isinstance(name, str):
            return f" (rule {name!r})"
    return ""


def check_personas(settings: Settings) -> None:
    if settings.titles.engine and settings.titles.engine not in settings.engines:
        known = ", ".join(sorted(settings.engines)) or "none configured"
        raise ConfigError(
            f"invalid configuration: titles.engine names {settings.titles.engine!r},"
            f" which is not in [engines] ({known})"
        )
    for name, persona in settings.personas.items():
        if persona.engine is not None and persona.engine not in settings.engines:
            known = ", ".join(sorted(settings.engines)) or "none configured"
            raise ConfigError(
                f"invalid configuration: personas.{name}.engine names "
                f"{persona.engine!r}, which is not in [engines] ({known})"
            )


def load_rules(settings: Settings) -> tuple[Rule, ...]:
    """The routing rules: from `policies_file` if set, else the inline `routes`.

    Raises ConfigError naming the file, the rule and the key at fault.
    """
    check_personas(settings)
    if settings.policies_file is None:
        rules = tuple(settings.routes)
        where = "routes"
    else:
        if settings.routes:
            raise ConfigError("set either inline routes or policies_file, not both")
        rules = _read_rules_file(settings.policies_file)
        where = str(settings.policies_file)
    for rule in rules:
        zone = rule.reset.timezone if rule.reset is not None else None
        if zone is not None:
            try:
                check_timezone(zone)
            except ValueError as exc:
                raise ConfigError(
                    f"invalid policies in {where}: rule {rule.name!r}: reset.timezone: {exc}"
                ) from exc
        persona = rule.session.persona
        if persona is not None and persona not in settings.personas:
            known = ", ".join(sorted(settings.personas)) or "none configured"
            raise ConfigError(
                f"invalid policies in {where}: rule {rule.name!r} names persona {persona!r}, "
                f"which is not in [personas] ({known})"
            )
    return rules


def _read_rules_file(path: Path) -> tuple[Rule, ...]:
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"cannot read policies file {path}: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"policies file {path} is not valid TOML: {exc}") from exc
    try:
        return tuple(RulesFile.model_validate(data).rules)
    except ValidationError as exc:
        lines = [f"invalid policies in {path}:"]
        for err in exc.errors():
            loc = err["loc"]
            key = ".".join(str(part) for part in loc)
            named = _rule_name(("routes", *loc[1:]), {"routes": data.get("rules")})
            lines.append(f"  {key}{named}: {err['msg']}")
        raise ConfigError("\n".join(lines)) from exc
