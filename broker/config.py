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
    path: Path = Path("var/ledger.db")
    synchronous: Literal["NORMAL", "FULL"] = "NORMAL"
    readers: int = Field(2, ge=1, le=16)
    # process: write transactions run in a child process with its own GIL
    # (ledger/writer/process.py); thread: in a thread of the daemon.
    writer: Literal["process", "thread"] = "process"
    # Writes that fail on the storage (disk full, I/O error) are run again until
    # they commit; if none can commit for this long, the daemon exits with status
    # 74 (EX_IOERR) for its supervisor to restart it (ledger/writer/group_commit.py).
    write_fail_exit_s: float = Field(60.0, gt=0)
    # The integrity check at start stops after this long (0: no check); see ledger/db.py.
    check_s: float = Field(10.0, ge=0)
    # Backpressure (ledger/writer/group_commit.py): writes queued for the writer at most;
    # a message past it waits up to `writer_wait_s` for room, then is `overloaded`.
    writer_queue: int = Field(100_000, ge=1, le=10_000_000)
    writer_wait_s: float = Field(10.0, ge=0, le=3600)
    # -- the ledger on PostgreSQL (ledger/postgres/, docs/cluster.md) --
    # "postgres" keeps the ledger in the database `dsn` names; `path`, `synchronous`,
    # `writer` and `check_s` are then SQLite's alone and unused.
    kind: Literal["sqlite", "postgres"] = "sqlite"
    dsn: str | None = None  # postgresql://user[:password]@host[:port]/dbname
    # A file holding the key that encrypts the SQLite ledger, its WAL and its backups
    # (ledger/port/cipher.py, docs/security.md); "" or unset: a plain ledger.
    key_file: Path | None = None

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
    model_config = ConfigDict(extra="allow")
    kind: Literal["echo", "subprocess", "openai", "python", "openai-agents", "adk", "langgraph"] = (
        "echo"
    )
    chunks: int = Field(3, ge=1, le=1000)
    delay_ms: int = Field(0, ge=0, le=60_000)
    timeout_s: float = Field(120.0, gt=0)
    # A turn that streams longer than this saves its partial output this often,
    # so a crash keeps what it had said (ledger/turns.py).
    progress_save_s: float = Field(1.0, gt=0)
    context_window: int = Field(8192, ge=256)
    encoding: str = "cl100k_base"  # tiktoken encoding, bundled offline
    reserve_reply_tokens: int = Field(1024, ge=0)  # room kept in the window for the reply
    compaction_threshold: float = Field(0.85, gt=0, le=1)  # of the window
    keep_recent_ratio: float = Field(0.3, ge=0, lt=1)  # of the window, kept verbatim
    compaction_timeout_s: float = Field(60.0, gt=0)  # then the deterministic summary
    # The model compactions ask for (a cheaper one, say); None: the turns' model.
    # A persona's own `compaction_model` wins (broker/mailbox/turn_parts.py).
    compaction_model: str | None = None
    command: list[str] = Field(default_factory=list)
    base_url: str | None = None
    model: str = "gpt-4o-mini"
    api_key: str | None = None
    entry: str | None = None  # kind "python": "module:attribute"
    agent: str | None = None  # kinds "openai-agents" and "adk": "module:attribute"
    graph: str | None = None  # kind "langgraph": "module:attribute", a compiled graph

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

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    command: list[str] = Field(default_factory=list)  # stdio: the server's command line
    url: str | None = None  # or streamable HTTP: "http://127.0.0.1:8000/mcp"
    allow: list[str] = Field(default_factory=list)  # the tools offered (by the server's names)

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerSettings:
        if bool(self.command) == bool(self.url):
            raise ValueError(f"MCP server {self.name!r}: set either command or url")
        return self


class McpSettings(_Section):
    servers: list[McpServerSettings] = Field(default_factory=list)

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
    # None: the broker's own uid / gid only.
    allowed_uids: list[int] | None = None
    allowed_gids: list[int] | None = None
    channel_tokens: dict[str, str] = Field(default_factory=dict)
    require_token: bool = False

    @field_validator("channel_tokens")
    @classmethod
    def _channel_names(cls, value: dict[str, str]) -> dict[str, str]:
        import re

        for name in value:
            if not re.fullmatch(CHANNEL_PATTERN, name):
                raise ValueError(f"channel name {name!r} must match {CHANNEL_PATTERN}")
        return value


class LoggingSettings(_Section):
    # Patterns (Python regular expressions) of the operator's secrets, replaced by
    # "[redacted]" in log lines and error messages beside the built-in ones
    # (plumbing/redact.py).
    redact: list[str] = Field(default_factory=list)

    @field_validator("redact")
    @classmethod
    def _compiles(cls, value: list[str]) -> list[str]:
        return [check_pattern(p) for p in value]


OperatorRole = Literal["read", "operate", "admin"]


class OperatorUid(_Section):
    uid: int = Field(ge=0)
    role: OperatorRole


class OperatorSettings(_Section):
    """`[operators]`: the role of each peer uid (broker/ops/roles.py); uid 0 and the
    daemon's own uid are `admin` whatever this says."""

    default_role: OperatorRole = "operate"
    uids: list[OperatorUid] = Field(default_factory=list)

    def roles(self) -> dict[int, OperatorRole]:
        return {u.uid: u.role for u in self.uids}


class QueueSettings(_Section):
    debounce_ms: int = Field(1500, ge=0, le=600_000)
    cap: int | None = Field(100, ge=1)
    drop: Literal["old", "new", "summarize"] = "old"
    person_mode: QueueMode = "interrupt"
    worker_mode: QueueMode = "followup"
    idle_stop_s: float = Field(30.0, gt=0)
    # An open item with no live actor for this long is stuck (health, doctor).
    stuck_after_s: float = Field(60.0, gt=0)


class WorkerSettings(_Section):
    max_depth: int = Field(2, ge=1, le=10)  # a worker's worker's ... worker
    max_children: int = Field(8, ge=1, le=1000)  # running workers per session
    timeout_s: float = Field(600.0, gt=0)  # a dispatch not finished by then times out
    persona: str | None = None  # a persona for workers; None: `system_prompt` below
    system_prompt: str = (
        "You are a worker agent. Another agent dispatched the task below to you. Do it, "
        "then reply with the result only: it goes back to the agent that asked. If the "
        "task takes you several turns (you wait for workers of your own or a timer), "
        "give the result with the worker_done tool when it is ready."
    )


class RecallSettings(_Section):
    budget_tokens: int = Field(8000, ge=256)  # of the tool's output
    # May an agent search every session's archive (session "*")? Off: its own only.
    cross_session: bool = False
    # Turns shown before and after each search hit, within its thread (seed 003).
    neighbours_before: int = Field(1, ge=0, le=5)
    neighbours_after: int = Field(1, ge=0, le=5)
    # A one-line hint to a turn whose message names something only older turns hold.
    hint: bool = True


class SnapshotSettings(_Section):
    # A file content an engine reports over this is recorded by its hash and
    # size only, with a note saying so (ledger/snapshots.py).
    max_bytes: int = Field(8 << 20, ge=0, le=1 << 30)


class RetentionSettings(_Section):
    # > 0: turns that ended longer ago than this many days become stubs (broker/retention.py)
    keep_days: float = Field(0.0, ge=0)


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
    idle_s: float = Field(0.0, ge=0)  # > 0: a message after this much silence starts a thread
    daily_at: str = ""  # "HH:MM": the first message after this local time each day does
    timezone: str = "UTC"  # of `daily_at`
    max_turns: int = Field(0, ge=0)  # > 0: a thread that reached this many turns rolls over

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
    # A cheap model writes each turn's title after the turn, off its path
    # (broker/titler.py): the name of an engine in [engines]. "": off, the title
    # stays the mechanical one (or the engine's, from an `intent` event).
    engine: str = ""
    timeout_s: float = Field(10.0, gt=0, le=600)  # per title; past it the title stays
    queue: int = Field(1000, ge=1, le=100_000)  # turns waiting for a title; past it, skipped


class Persona(_Section):
    engine: str | None = None  # a name in [engines]; None: the default [engine]
    system_prompt: str | None = None
    model: str | None = None  # passed to the engine; None: the engine's own
    context_window: int | None = Field(None, ge=256)
    compaction_model: str | None = None  # None: its engine's `compaction_model`


class RuntimeSettings(_Section):
    """`[runtime]`: where sessions run (docs/cluster.md "Sessions on Temporal")."""

    kind: Literal["local", "temporal"] = "local"  # local: in-process actors
    address: str = "127.0.0.1:7233"
    namespace: str = "default"
    task_queue: str = "broker"
    connect_timeout_s: float = Field(5.0, gt=0, le=300)
    # A turn activity that has not heartbeat for this long is given to another worker.
    heartbeat_timeout_s: float = Field(5.0, gt=0, le=3600)
    # Single node only, for tests and a demo: a cluster needs a shared ledger.
    allow_local_ledger: bool = False
    # "host:port": the node's Temporal worker metrics (cache hits and misses, task
    # latencies, the sessions' replays) served for Prometheus there; "" serves none.
    metrics_address: str = ""
    # A session's workflow run goes on as a new run, between two turns, once its history
    # holds this many events, so that a node taking it over (another node died, this one
    # restarted) replays a short history; 0 leaves it to Temporal's suggestion alone.
    history_max_events: int = Field(60, ge=0, le=50_000)
    # true runs the session workflows in Temporal's sandbox. It checks nothing of ours:
    # the workflow modules are passed through it (they import the broker's), so no
    # call of theirs is restricted; and it costs a fifth of a node's CPU a turn
    # (docs/performance.md "Where a clustered turn's CPU goes").
    workflow_sandbox: bool = False


class ClusterSettings(_Section):
    """`[cluster]`: several nodes on one ledger (docs/cluster.md "Two and more nodes").
    Used on the Temporal runtime only: a local node sends its replies itself."""

    # Pending replies of this node's adapters' channels looked for in the ledger.
    outbox_poll_ms: int = Field(100, ge=5, le=60_000)
    # A node's claim on a reply it sent; past it another node may send it again.
    claim_lease_ms: int = Field(5_000, ge=100, le=3_600_000)


class MetricsSettings(_Section):
    """`[metrics]`: Prometheus text at GET /metrics (broker/observe/metrics.py)."""

    address: str = ""  # "127.0.0.1:9108", or a Unix socket path; "": off


class TracingSettings(_Section):
    """`[tracing]`: OpenTelemetry traces over OTLP/HTTP (broker/observe/tracing.py)."""

    otlp_endpoint: str = ""  # "http://127.0.0.1:4318"; "": off
    capture_content: bool = False  # message text in the spans

    @field_validator("otlp_endpoint")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if value and not value.startswith(("http://", "https://")):
            raise ValueError('expected an http(s) URL, as "http://127.0.0.1:4318"')
        return value


class ConsoleSettings(_Section):
    """`[console]`: the web console (broker/console/)."""

    address: str = ""  # "127.0.0.1:8765", or a Unix socket path; "": off
    token_file: Path | None = None  # required with `address`: "<role> <token>" lines

    @model_validator(mode="after")
    def _tokens_when_served(self) -> ConsoleSettings:
        if self.address and self.token_file is None:
            raise ValueError("console.address needs console.token_file")
        return self


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="BROKER_", env_nested_delimiter="__", extra="forbid", validate_default=True
    )

    server_name: str = "brokerd"
    socket_path: Path = Path("var/broker.sock")
    socket_mode: int = Field(0o660, ge=0, le=0o777)
    max_frame_bytes: int = Field(1 << 20, ge=1024, le=64 << 20)
    max_text_bytes: int = Field(256 << 10, ge=16, le=32 << 20)
    max_inflight: int = Field(1024, ge=1, le=1_000_000)
    # Bytes of inbound frames, over all connections, handed to the ledger writer
    # and not yet committed; past it inbound frames are answered `overloaded`.
    max_pending_bytes: int = Field(64 << 20, ge=1024, le=1 << 40)
    # A frame begun (bytes without their newline) and not finished this long after
    # its first byte closes its connection. A connection with nothing half sent
    # may stay idle for as long as it likes.
    frame_timeout_s: float = Field(30.0, gt=0, le=86_400)
    shutdown_grace_s: float = Field(10.0, ge=0)
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["json", "console"] = "json"
    ledger: LedgerSettings = LedgerSettings()
    engine: EngineSettings = EngineSettings()
    auth: AuthSettings = AuthSettings()
    operators: OperatorSettings = OperatorSettings()
    logging: LoggingSettings = LoggingSettings()
    queue: QueueSettings = QueueSettings()
    owners: list[Owner] = Field(default_factory=list)
    routes: list[Rule] = Field(default_factory=list)  # inline rules, or:
    policies_file: Path | None = None  # a TOML file of [[rules]]
    personas: dict[str, Persona] = Field(default_factory=dict)
    engines: dict[str, EngineSettings] = Field(default_factory=dict)  # for personas
    workers: WorkerSettings = WorkerSettings()
    recall: RecallSettings = RecallSettings()
    snapshots: SnapshotSettings = SnapshotSettings()
    retention: RetentionSettings = RetentionSettings()
    reset: ResetSettings = ResetSettings()

    titles: TitleSettings = TitleSettings()
    node_id: str = Field("", max_length=64)  # unique per node of a cluster; shown in `health`
    runtime: RuntimeSettings = RuntimeSettings()
    cluster: ClusterSettings = ClusterSettings()
    metrics: MetricsSettings = MetricsSettings()
    tracing: TracingSettings = TracingSettings()
    console: ConsoleSettings = ConsoleSettings()
    mcp: McpSettings = McpSettings()  # [[mcp.servers]]: tools for engines

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
